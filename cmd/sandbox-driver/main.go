// Command sandbox-driver is the main process of a sandbox container: it
// serves the /io protocol (ioproto/PROTOCOL.md), running each command in a
// persistent Python kernel or in bash. It expects an init process above it
// that reaps zombies (docker run --init).
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"github.com/sandboxd/sandboxd/driver"
	"github.com/sandboxd/sandboxd/ioproto"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "sandbox-driver:", err)
		os.Exit(1)
	}
}

func run() error {
	var cfg driver.Config
	fs := flag.NewFlagSet("sandbox-driver", flag.ContinueOnError)
	fs.StringVar(&cfg.IODir, "io", envOr("SANDBOX_IO", "/io"), "protocol directory (env SANDBOX_IO)")
	fs.StringVar(&cfg.Workspace, "workspace", envOr("SANDBOX_WORKSPACE", "/workspace"), "working directory for commands (env SANDBOX_WORKSPACE)")
	fs.StringVar(&cfg.Python, "python", envOr("SANDBOX_PYTHON", "python3"), "Python interpreter for the kernel (env SANDBOX_PYTHON)")
	fs.StringVar(&cfg.Wake, "wake", envOr("SANDBOX_WAKE", "auto"), `how to notice new commands: "auto", "inotify" or "poll" (env SANDBOX_WAKE)`)
	fs.DurationVar(&cfg.Grace, "grace", 2*time.Second, "time a command gets to stop after SIGINT before it is killed")
	fs.Int64Var(&cfg.MaxOutput, "max-output", envInt("SANDBOX_MAX_OUTPUT", 16<<20), "bytes of output one command may store (after JSON escaping) before the rest is discarded; lowered to fit the out budget; 0 for the most the budget allows (env SANDBOX_MAX_OUTPUT)")
	fs.Int64Var(&cfg.OutBudget, "out-budget", envInt("SANDBOX_OUT_BUDGET", 0), "bytes /io/out may take on disk (retained commands, the running one, the reserve); 0 for half the /io volume, at most 1 GiB (env SANDBOX_OUT_BUDGET)")
	fs.IntVar(&cfg.KeepMin, "keep-min", 100, "finished commands whose output is always kept")
	fs.IntVar(&cfg.KeepMax, "keep-max", 1000, "finished commands whose output is kept at most")
	fs.DurationVar(&cfg.MaxAge, "max-age", time.Hour, "age after which output beyond keep-min is pruned")
	level := fs.String("log-level", envOr("SANDBOX_LOG_LEVEL", "info"), "log level: debug, info, warn, error")
	if err := fs.Parse(os.Args[1:]); err != nil {
		return err
	}
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(*level)); err != nil {
		return fmt.Errorf("bad --log-level: %w", err)
	}
	cfg.Logger = slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: lvl}))

	// A warm-pool container's driver may be adopted by a waking sandbox
	// (driver/adopt.go). The switch is the host's, not the user's: it is
	// removed before any kernel inherits the environment.
	cfg.Pool = os.Getenv(ioproto.EnvPoolDriver) == "1"
	os.Unsetenv(ioproto.EnvPoolDriver)

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	return driver.Serve(ctx, cfg)
}

func envInt(key string, def int64) int64 {
	if v, err := strconv.ParseInt(os.Getenv(key), 10, 64); err == nil {
		return v
	}
	return def
}

func envOr(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}
