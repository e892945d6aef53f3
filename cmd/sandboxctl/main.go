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

const usageText = `Usage: sandboxctl [--addr ADDR] [--token TOKEN] [--tls] [--ca FILE] COMMAND [ARGS]

Commands:
  list [--tenant TENANT] [--user USER] [--state running|dead|hibernated] [--metadata K=V]... [--json]
                         list sandboxes (--metadata: only those with every pair)
  inspect SANDBOX_ID     print one sandbox as JSON
  kill SANDBOX_ID...     delete sandboxes (each is attempted)
  kill --user USER [--tenant TENANT]
                         delete all of a user's sandboxes (in every tenant
                         the token sees, unless --tenant)
  exec --user USER [--language python|bash|javascript|typescript|r] [--env NAME=VALUE]... [--timeout D] [--command-id ID] CODE
                         run CODE ("-" reads stdin) in the user's sandbox,
                         acquiring it first, and stream its output
  resume SANDBOX_ID COMMAND_ID [--after-seq N]
                         stream a command's output (again), after event N
  ls SANDBOX_ID [PATH] [--depth N]
                         list a directory of the sandbox's /workspace (N levels, 1-10)
  mkdir [-p] SANDBOX_ID PATH
                         create a directory in /workspace (-p: parents, no error if it exists)
  rm [-r] SANDBOX_ID PATH
                         remove a file or (-r: with its content) a directory from /workspace
  mv [-f] SANDBOX_ID FROM TO
                         rename within /workspace (-f: replace an existing destination)
` + psUsage + `
  set-timeout SANDBOX_ID DURATION
                         set the sandbox's idle timeout (e.g. 2h): it expires
                         DURATION after its last use, counted from now
  ctx create SANDBOX_ID [--language LANG] [--cwd DIR]
                         create a context (own interpreter and globals, cwd DIR
                         under /workspace) and print its ID
  ctx ls SANDBOX_ID      list a sandbox's contexts
  ctx restart SANDBOX_ID CONTEXT_ID
                         give a context fresh globals
  ctx rm SANDBOX_ID CONTEXT_ID
                         delete a context
` + hibernateUsage + `

Global flags:
  --addr ADDR            sandboxd's gRPC address (env SANDBOXCTL_ADDR; default 127.0.0.1:50051)
  --token TOKEN          bearer token for a sandboxd started with --auth-tokens
                         (env SANDBOXCTL_TOKEN; prefer the variable: arguments show in ps)
  --tls                  connect with TLS, verifying the server against the system's CAs
  --ca FILE              connect with TLS, verifying the server against this CA (PEM); implies --tls
`

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
			fmt.Fprint(stdout, usageText)
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
		fmt.Fprint(stderr, usageText)
		return exitUsage
	}
	cmd, rest := fs.Arg(0), fs.Args()[1:]

	commands := map[string]func(context.Context, *cli, []string) int{
		"list":        cmdList,
		"inspect":     cmdInspect,
		"kill":        cmdKill,
		"exec":        cmdExec,
		"resume":      cmdResume,
		"ls":          cmdLs,
		"mkdir":       cmdMkdir,
		"rm":          cmdRm,
		"mv":          cmdMv,
		"ps":          cmdPs,
		"set-timeout": cmdSetTimeout,
		"ctx":         cmdCtx,
		"hibernate":   cmdHibernate, "wake": cmdWake,
	}
	if cmd == "help" {
		fmt.Fprint(stdout, usageText)
		return exitOK
	}
	fn, ok := commands[cmd]
	if !ok {
		return usageErr(stderr, "", fmt.Errorf("unknown command %q (see sandboxctl help)", cmd))
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
	return fn(ctx, c, rest)
}

// usageErr reports a bad command line in one line and returns exitUsage;
// for -h/--help it prints the usage and returns exitOK.
func usageErr(stderr io.Writer, cmd string, err error) int {
	if errors.Is(err, flag.ErrHelp) {
		fmt.Fprint(stderr, usageText)
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
// sandbox sb-1 not found ...") and returns exitFailure.
func (c *cli) fail(what string, err error) int {
	fmt.Fprintf(c.stderr, "sandboxctl: %s: %s\n", what, c.describe(err))
	return exitFailure
}

// describe turns an RPC error into the server's message, or for a transport
// failure a hint that sandboxd is not reachable. The client's errors say
// what the call was about; the command line says that already.
func (c *cli) describe(err error) string {
	var rpc interface{ GRPCStatus() *status.Status }
	if !errors.As(err, &rpc) {
		return err.Error()
	}
	st := rpc.GRPCStatus()
	if st.Code() == codes.Unavailable && strings.Contains(st.Message(), "connection error") {
		return fmt.Sprintf("cannot reach sandboxd at %s (is it running? set --addr or SANDBOXCTL_ADDR): %s", c.addr, st.Message())
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
