package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/sandboxd/sandboxd/agent/session"
	"github.com/sandboxd/sandboxd/internal/termsafe"
)

// runSessions lists, resumes or deletes the terminal user's stored
// conversations:
//
//	agent sessions [list] [--user USER] [--state-dir DIR]
//	agent sessions resume ID [chat flags]
//	agent sessions delete ID... [--user USER] [--state-dir DIR]
//
// Listing and deleting need no model and no sandboxd.
func runSessions(ctx context.Context, args []string, getenv func(string) string, stdin io.Reader, stdout, stderr io.Writer) int {
	verb := "list"
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		verb, args = args[0], args[1:]
	}
	if verb == "resume" {
		if len(args) == 0 || strings.HasPrefix(args[0], "-") {
			fmt.Fprintln(stderr, "agent sessions resume: want the conversation ID (see agent sessions list)")
			return exitUsage
		}
		cfg, err := parseConfig("chat", append([]string{"--session", args[0]}, args[1:]...), getenv)
		if err != nil {
			fmt.Fprintf(stderr, "agent sessions resume: %v\n", err)
			return exitUsage
		}
		logger := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: cfg.logLevel}))
		return runChat(ctx, cfg, logger, stdin, stdout, stderr)
	}
	if verb != "list" && verb != "delete" {
		fmt.Fprintf(stderr, "agent sessions: unknown action %q: want list, resume or delete\n", verb)
		return exitUsage
	}
	env := func(name, def string) string {
		if v := getenv(name); v != "" {
			return v
		}
		return def
	}
	fs := flag.NewFlagSet("sessions", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	user := fs.String("user", env("AGENT_USER", "cli-"+sanitize(env("USER", "user"))), "")
	stateDir := fs.String("state-dir", env("AGENT_STATE_DIR", ""), "")
	var ids []string
	for len(args) > 0 {
		if err := fs.Parse(args); err != nil {
			fmt.Fprintf(stderr, "agent sessions %s: %v\n", verb, err)
			return exitUsage
		}
		if fs.NArg() == 0 {
			break
		}
		ids = append(ids, fs.Arg(0))
		args = fs.Args()[1:]
	}
	switch {
	case verb == "list" && len(ids) > 0:
		fmt.Fprintf(stderr, "agent sessions list: unexpected argument %q\n", ids[0])
		return exitUsage
	case verb == "delete" && len(ids) == 0:
		fmt.Fprintln(stderr, "agent sessions delete: want one or more conversation IDs (see agent sessions list)")
		return exitUsage
	}
	if *stateDir == "" {
		dir, err := defaultStateDir(getenv)
		if err != nil {
			fmt.Fprintf(stderr, "agent sessions: %v\n", err)
			return exitFailure
		}
		*stateDir = dir
	}
	dbPath := filepath.Join(*stateDir, "agent.db")
	if _, err := os.Stat(dbPath); errors.Is(err, os.ErrNotExist) {
		if verb == "list" {
			fmt.Fprintf(stdout, "No conversations yet (state directory %s).\n", *stateDir)
			return exitOK
		}
		fmt.Fprintf(stderr, "agent sessions delete: no conversations in %s\n", *stateDir)
		return exitFailure
	}
	if verb == "delete" {
		// Deleting writes: not while another agent process uses the state.
		unlock, err := lockStateDir(*stateDir)
		if err != nil {
			fmt.Fprintf(stderr, "agent sessions delete: %v\n", err)
			return exitFailure
		}
		defer unlock()
	}
	store, err := session.Open(dbPath)
	if err != nil {
		fmt.Fprintf(stderr, "agent sessions: %v\n", err)
		return exitFailure
	}
	defer store.Close()
	if verb == "list" {
		convs, err := store.Conversations(ctx, *user)
		if err != nil {
			fmt.Fprintf(stderr, "agent sessions list: %v\n", err)
			return exitFailure
		}
		if len(convs) == 0 {
			fmt.Fprintf(stdout, "No conversations of %s yet.\n", *user)
			return exitOK
		}
		tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "ID\tUPDATED\tSTATE\tTOKENS\tTITLE")
		for _, c := range convs {
			title := c.Title
			if title == "" {
				title = "(empty)"
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\n", termsafe.Field(c.ID), c.UpdatedAt.Local().Format(time.DateTime), termsafe.Field(string(c.State)),
				c.Usage.Total(), termsafe.Field(title))
		}
		tw.Flush()
		fmt.Fprintln(stdout, "\nContinue one with: agent sessions resume ID   Delete one with: agent sessions delete ID")
		return exitOK
	}
	code := exitOK
	for _, id := range ids {
		c, err := store.Conversation(ctx, id)
		if err == nil && c.UserID != *user {
			err = fmt.Errorf("conversation %s: %w", id, session.ErrNotFound) // another user's: as if absent
		}
		if err == nil {
			err = store.DeleteConversation(ctx, id)
		}
		if err != nil {
			fmt.Fprintf(stderr, "agent sessions delete: %v\n", err)
			code = exitFailure
			continue
		}
		fmt.Fprintf(stdout, "deleted %s\n", id)
	}
	return code
}
