package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/sandboxd/sandboxd/agent/llm"
)

// config is the command line and environment, resolved.
type config struct {
	model          llm.Config
	stateDir       string
	sandboxdAddr   string
	sandboxdToken  string
	maxIterations  int
	imageInput     bool
	commandTimeout time.Duration
	logLevel       slog.Level

	// chat
	session string
	user    string
	// serve
	listen   string
	plotlyJS string
}

// userID is what sandboxd accepts as a user ID.
var userID = regexp.MustCompile(`^[A-Za-z0-9._@-]{1,128}$`)

// parseConfig reads cmd's flags, each defaulting to its environment
// variable; flags win.
func parseConfig(cmd string, args []string, getenv func(string) string) (config, error) {
	env := func(name, def string) string {
		if v := getenv(name); v != "" {
			return v
		}
		return def
	}
	var c config
	fs := flag.NewFlagSet(cmd, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.StringVar(&c.model.BaseURL, "base-url", env("OPENAI_BASE_URL", ""), "")
	fs.StringVar(&c.model.APIKey, "api-key", env("OPENAI_API_KEY", ""), "")
	fs.StringVar(&c.model.Model, "model", env("AGENT_MODEL", ""), "")
	fs.StringVar(&c.stateDir, "state-dir", env("AGENT_STATE_DIR", ""), "")
	fs.StringVar(&c.sandboxdAddr, "sandboxd", env("AGENT_SANDBOXD_ADDR", "127.0.0.1:50051"), "")
	fs.StringVar(&c.sandboxdToken, "sandboxd-token", env("AGENT_SANDBOXD_TOKEN", ""), "")
	maxIter := fs.String("max-iterations", env("AGENT_MAX_ITERATIONS", "20"), "")
	timeout := fs.String("command-timeout", env("AGENT_COMMAND_TIMEOUT", "0"), "")
	imageInput := fs.String("image-input", env("AGENT_IMAGE_INPUT", "true"), "")
	defLevel := "info"
	if cmd == "chat" {
		defLevel = "warn" // the terminal is for the conversation
	}
	level := fs.String("log-level", env("AGENT_LOG_LEVEL", defLevel), "")
	if cmd == "chat" {
		fs.StringVar(&c.session, "session", "", "")
		fs.StringVar(&c.user, "user", env("AGENT_USER", ""), "")
	} else {
		fs.StringVar(&c.listen, "listen", env("AGENT_LISTEN", "127.0.0.1:8080"), "")
		fs.StringVar(&c.plotlyJS, "plotly-js", env("AGENT_PLOTLY_JS", ""), "")
	}
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	if fs.NArg() > 0 {
		return c, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	// The most likely mistake, so reported first, in one message.
	c.model.MaxRetries = 2
	if err := c.model.Validate(); err != nil {
		return c, err
	}
	var err error
	if c.maxIterations, err = strconv.Atoi(*maxIter); err != nil || c.maxIterations < 1 {
		return c, fmt.Errorf("--max-iterations %q: want a positive number", *maxIter)
	}
	if c.commandTimeout, err = time.ParseDuration(*timeout); err != nil || c.commandTimeout < 0 {
		return c, fmt.Errorf("--command-timeout %q: want a duration such as 5m", *timeout)
	}
	if c.imageInput, err = strconv.ParseBool(*imageInput); err != nil {
		return c, fmt.Errorf("--image-input %q: want true or false", *imageInput)
	}
	if err := c.logLevel.UnmarshalText([]byte(*level)); err != nil {
		return c, fmt.Errorf("--log-level %q: want debug, info, warn or error", *level)
	}
	if c.stateDir == "" {
		c.stateDir, err = defaultStateDir(getenv)
		if err != nil {
			return c, err
		}
	}
	if cmd == "chat" && c.user == "" {
		c.user = "cli-" + sanitize(env("USER", "user"))
	}
	if cmd == "chat" && !userID.MatchString(c.user) {
		return c, fmt.Errorf("--user %q: want 1-128 characters of [A-Za-z0-9._@-]", c.user)
	}
	return c, nil
}

func defaultStateDir(getenv func(string) string) (string, error) {
	if d := getenv("XDG_STATE_HOME"); d != "" {
		return filepath.Join(d, "sandboxd-agent"), nil
	}
	home := getenv("HOME")
	if home == "" {
		return "", errors.New("no home directory to keep state in; set --state-dir or AGENT_STATE_DIR")
	}
	return filepath.Join(home, ".local", "state", "sandboxd-agent"), nil
}

// sanitize keeps the characters sandboxd allows in user IDs.
func sanitize(s string) string {
	s = strings.Map(func(r rune) rune {
		if r < 128 && userID.MatchString(string(r)) {
			return r
		}
		return '_'
	}, s)
	if len(s) > 100 {
		s = s[:100]
	}
	return s
}
