// Command sandboxctl is the operator's client for sandboxd: list, inspect and
// kill sandboxes, run code in a user's sandbox and resume a command's output,
// and list, create, remove and rename files in a sandbox's /workspace.
//
//	sandboxctl [--addr ADDR] [--token TOKEN] [--tls] [--ca FILE] COMMAND [ARGS]
//
// ADDR defaults to $SANDBOXCTL_ADDR, then 127.0.0.1:50051; TOKEN to
// $SANDBOXCTL_TOKEN (sent as "authorization: Bearer TOKEN"; operators use an
// admin token, which sees every tenant). Errors are one line on stderr; the
// exit status is 0 on success, 1 on failure, 2 on a usage error and 130 when
// interrupted.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sandboxd/sandboxd/client"
	"github.com/sandboxd/sandboxd/internal/termsafe"
)

// Exit statuses.
const (
	exitOK          = 0
	exitFailure     = 1
	exitUsage       = 2
	exitInterrupted = 130 // 128+SIGINT, what shells report for Ctrl-C
)

const defaultAddr = "127.0.0.1:50051"

// rpcTimeout bounds each unary call; deleting a sandbox stops its container,
// which can take Docker several seconds.
const rpcTimeout = time.Minute

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Getenv, os.Stdin, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// cli carries what every command needs.
type cli struct {
	addr     string
	sandboxd *client.Client
	stdin    io.Reader
	stdout   io.Writer
	stderr   io.Writer
}

// run executes one sandboxctl invocation and returns its exit status. ctx is
// cancelled on SIGINT/SIGTERM.
func run(ctx context.Context, args []string, getenv func(string) string, stdin io.Reader, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("sandboxctl", flag.ContinueOnError)
	fs.SetOutput(io.Discard) // usage errors are reported in one line below
	addr := fs.String("addr", "", "")
	token := fs.String("token", "", "")
	useTLS := fs.Bool("tls", false, "")
	caFile := fs.String("ca", "", "")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			writeUsage(stdout)
			return exitOK
		}
		return usageErr(stderr, "", err)
	}
	if *addr == "" {
		*addr = getenv("SANDBOXCTL_ADDR")
	}
	if *addr == "" {
		*addr = defaultAddr
	}
	if *token == "" {
		*token = getenv("SANDBOXCTL_TOKEN")
	}
	if fs.NArg() == 0 {
		writeUsage(stderr)
		return exitUsage
	}
	cmd, rest := fs.Arg(0), fs.Args()[1:]

	if cmd == "help" {
		if len(rest) == 0 {
			writeUsage(stdout)
			return exitOK
		}
		cmd, rest = rest[0], []string{"--help"}
	}
	command, ok := lookup(cmd)
	if !ok {
		err := fmt.Errorf("unknown command %q (see sandboxctl help)", cmd)
		if s := suggest(cmd); len(s) > 0 {
			err = fmt.Errorf("unknown command %q; did you mean %s? (see sandboxctl help)", cmd, strings.Join(s, " or "))
		}
		return usageErr(stderr, "", err)
	}
	if wantsHelp(rest) {
		writeCommandHelp(stdout, command)
		return exitOK
	}

	// The client's default message size already admits rich outputs
	// (plots arrive inline and can be several MiB).
	opts := []client.Option{client.WithToken(*token)}
	if *useTLS || *caFile != "" {
		cfg, err := client.TLSConfig(*caFile)
		if err != nil {
			return usageErr(stderr, "", fmt.Errorf("--ca %s: %v", *caFile, err))
		}
		opts = append(opts, client.WithTLS(cfg))
	}
	sandboxd, err := client.Dial(*addr, opts...)
	if err != nil {
		// Dial's error names the address; say which flag set it instead.
		if inner := errors.Unwrap(err); inner != nil {
			err = inner
		}
		return usageErr(stderr, "", fmt.Errorf("--addr %q: %v", *addr, err))
	}
	defer sandboxd.Close()
	c := &cli{addr: *addr, sandboxd: sandboxd, stdin: stdin, stdout: stdout, stderr: stderr}
	return command.run(ctx, c, rest)
}

// usageErr reports a bad command line in one line (and where to find the
// command's help) and returns exitUsage; for -h/--help it prints the
// command's help and returns exitOK.
func usageErr(stderr io.Writer, cmd string, err error) int {
	if c, ok := lookup(strings.Fields(cmd + " x")[0]); ok {
		if errors.Is(err, flag.ErrHelp) {
			writeCommandHelp(stderr, c)
			return exitOK
		}
		fmt.Fprintf(stderr, "sandboxctl %s: %v (see sandboxctl help %s)\n", cmd, err, c.name)
		return exitUsage
	}
	if errors.Is(err, flag.ErrHelp) {
		writeUsage(stderr)
		return exitOK
	}
	prefix := "sandboxctl"
	if cmd != "" {
		prefix += " " + cmd
	}
	fmt.Fprintf(stderr, "%s: %v\n", prefix, err)
	return exitUsage
}

// fail reports a failed operation in one line ("sandboxctl: kill sb-1:
// sandbox sb-1 not found ...") and returns exitFailure. The server's
// message is escaped (termsafe.Line): it may quote what a sandbox or a
// tenant sent.
func (c *cli) fail(what string, err error) int {
	fmt.Fprintf(c.stderr, "sandboxctl: %s: %s\n", what, c.describe(err))
	return exitFailure
}

// describe turns an RPC error into the server's message, or for a transport
// failure a hint that sandboxd is not reachable. The client's errors say
// what the call was about; the command line says that already. It is
// escaped (termsafe.Line), one line: a message may quote what a sandbox or
// a tenant sent.
func (c *cli) describe(err error) string {
	return termsafe.Line(c.describeRaw(err))
}

func (c *cli) describeRaw(err error) string {
	var rpc interface{ GRPCStatus() *status.Status }
	if !errors.As(err, &rpc) {
		return err.Error()
	}
	st := rpc.GRPCStatus()
	if st.Code() == codes.Unavailable {
		msg := st.Message()
		switch {
		case strings.Contains(msg, "produced zero addresses"), strings.Contains(msg, "no such host"), strings.Contains(msg, "name resolver"):
			return fmt.Sprintf("cannot resolve the host of sandboxd's address %q (set --addr or SANDBOXCTL_ADDR): %s", c.addr, msg)
		case strings.Contains(msg, "connection error"), strings.Contains(msg, "connection refused"):
			return fmt.Sprintf("cannot reach sandboxd at %s (is it running? set --addr or SANDBOXCTL_ADDR): %s", c.addr, msg)
		}
	}
	if st.Code() == codes.Canceled {
		return "interrupted"
	}
	return st.Message()
}

// parseArgs parses flags wherever they appear among the positional
// arguments ("resume SB CMD --after-seq 3" as well as "resume --after-seq 3
// SB CMD"); the standard flag package stops at the first positional one.
// "--" ends flag parsing; a lone "-" is positional (stdin).
func parseArgs(fs *flag.FlagSet, args []string) ([]string, error) {
	fs.SetOutput(io.Discard)
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		rest := fs.Args()
		if len(rest) == 0 {
			return pos, nil
		}
		// fs.Parse consumed a "--" if that is what stopped it; it then left
		// everything after as positional.
		if len(args) > len(rest) && args[len(args)-len(rest)-1] == "--" {
			return append(pos, rest...), nil
		}
		pos = append(pos, rest[0])
		args = rest[1:]
	}
}

// rpcCtx bounds one unary call.
func rpcCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, rpcTimeout)
}
