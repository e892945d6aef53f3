package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"

	"github.com/charmbracelet/x/term"

	"github.com/sandboxd/sandboxd/agent/chat"
)

func runChat(ctx context.Context, cfg config, logger *slog.Logger, stdin io.Reader, stdout, stderr io.Writer) int {
	a, err := assemble(cfg, logger)
	if err != nil {
		fmt.Fprintf(stderr, "agent chat: %v\n", err)
		return exitFailure
	}
	defer a.close()

	// Ctrl-C stops a running turn, or ends the session at the prompt.
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, os.Interrupt)
	defer signal.Stop(sigs)
	interrupts := make(chan struct{})
	go func() {
		for range sigs {
			select {
			case interrupts <- struct{}{}:
			case <-ctx.Done():
				return
			}
		}
	}()

	err = chat.Run(ctx, chat.Options{
		Agent: a.agent, UserID: cfg.user, ConversationID: cfg.session,
		In: stdin, Out: stdout, ImageDir: filepath.Join(cfg.stateDir, "images"), Interrupts: interrupts,
		Markdown: terminalMarkdown(stdout, logger),
	})
	switch {
	case err == nil:
		return exitOK
	case errors.Is(err, chat.ErrInterrupted), errors.Is(err, context.Canceled):
		return exitInterrupted
	default:
		fmt.Fprintf(stderr, "agent chat: %v\n", err)
		return exitFailure
	}
}

// terminalMarkdown renders the model's Markdown when the output is a
// terminal (GLAMOUR_STYLE picks the style; default: by the terminal's
// background); piped output stays plain Markdown.
func terminalMarkdown(out io.Writer, logger *slog.Logger) func(string) string {
	f, ok := out.(*os.File)
	if !ok || !term.IsTerminal(f.Fd()) {
		return nil
	}
	width := 100
	if w, _, err := term.GetSize(f.Fd()); err == nil && w > 20 {
		width = min(w-2, 120)
	}
	style := os.Getenv("GLAMOUR_STYLE")
	if style == "" {
		style = "auto"
	}
	render, err := chat.MarkdownRenderer(style, width)
	if err != nil {
		logger.Warn("Markdown rendering off", "err", err)
		return nil
	}
	return render
}
