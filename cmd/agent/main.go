// Command agent is an LLM agent that runs code in sandboxd's sandboxes,
// with a terminal chat and a web interface. Conversations are stored under
// the state directory and survive crashes of the agent: a conversation
// interrupted in the middle of a tool call resumes where it stopped, without
// running the code again.
//
//	agent chat [--session ID] [flags]   chat in the terminal
//	agent serve [--listen ADDR] [flags] serve the web interface
//	agent sessions [list|resume ID|delete ID...]
//
// The model is any OpenAI-compatible Chat Completions endpoint with tool
// calling: OPENAI_BASE_URL, OPENAI_API_KEY and AGENT_MODEL (or --base-url,
// --api-key, --model). Run "agent help" for every flag.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
)

// Exit statuses.
const (
	exitOK          = 0
	exitFailure     = 1
	exitUsage       = 2
	exitInterrupted = 130
)

const usageText = `Usage:
  agent chat [--session ID] [--user USER] [flags]   chat in the terminal
  agent serve [--listen ADDR] [flags]               serve the web interface
  agent sessions [list]                             list your terminal conversations
  agent sessions resume ID [flags]                  continue one (as chat --session ID)
  agent sessions delete ID...                       delete conversations (not the sandbox)
  agent help                                        show this help

Model (any OpenAI-compatible Chat Completions endpoint with tool calling):
  --base-url URL       endpoint, e.g. http://localhost:11434/v1 (env OPENAI_BASE_URL; default OpenAI)
  --api-key KEY        API key (env OPENAI_API_KEY; prefer the environment)
  --model NAME         model name (env AGENT_MODEL)

Agent:
  --state-dir DIR      conversations database and saved images
                       (env AGENT_STATE_DIR; default ~/.local/state/sandboxd-agent)
  --sandboxd ADDR      sandboxd's gRPC address (env AGENT_SANDBOXD_ADDR; default 127.0.0.1:50051)
  --sandboxd-token T   bearer token for sandboxd, if it requires one (env AGENT_SANDBOXD_TOKEN)
  --max-iterations N   model calls per message at most (env AGENT_MAX_ITERATIONS; default 20)
  --command-timeout D  limit of each code run (env AGENT_COMMAND_TIMEOUT; default: sandboxd's)
  --image-input BOOL   send figures to the model as image input (env AGENT_IMAGE_INPUT; default
                       true; set false for models without vision)
  --log-level LEVEL    debug, info, warn or error (env AGENT_LOG_LEVEL; default info, warn for chat)

chat:
  --session ID         continue conversation ID (resuming it if it was interrupted)
  --user USER          whose sandbox new conversations use (env AGENT_USER; default cli-$USER)

serve:
  --listen ADDR        HTTP address (env AGENT_LISTEN; default 127.0.0.1:8080)
  --plotly-js PATH     a plotly.min.js to serve instead of the one built in (env AGENT_PLOTLY_JS;
                       default: plotly.js 4.1.2, embedded, so charts draw offline)

One agent process uses a state directory at a time.
`

func main() {
	os.Exit(run(os.Args[1:], os.Getenv, os.Stdin, os.Stdout, os.Stderr))
}

// run executes one invocation and returns its exit status.
func run(args []string, getenv func(string) string, stdin io.Reader, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usageText)
		return exitUsage
	}
	cmd, rest := args[0], args[1:]
	switch cmd {
	case "help", "-h", "--help":
		fmt.Fprint(stdout, usageText)
		return exitOK
	case "sessions":
		ctx, cancel := signal.NotifyContext(context.Background(), syscall.SIGTERM)
		defer cancel()
		return runSessions(ctx, rest, getenv, stdin, stdout, stderr)
	case "chat", "serve":
	default:
		fmt.Fprintf(stderr, "agent: unknown command %q (see agent help)\n", cmd)
		return exitUsage
	}
	cfg, err := parseConfig(cmd, rest, getenv)
	if errors.Is(err, flag.ErrHelp) {
		fmt.Fprint(stdout, usageText)
		return exitOK
	}
	if err != nil {
		fmt.Fprintf(stderr, "agent %s: %v\n", cmd, err)
		return exitUsage
	}
	logger := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: cfg.logLevel}))

	ctx, cancel := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer cancel()
	switch cmd {
	case "chat":
		return runChat(ctx, cfg, logger, stdin, stdout, stderr)
	default:
		return runServe(ctx, cfg, logger, stderr)
	}
}
