// Command sandbox-iosidecar is the io sidecar of a sandbox Pod on the
// Kubernetes backend (orchestrator/backend/kube/iosidecar): it serves sandboxio.v1
// to sandboxd — the host half of the /io protocol and the files API on
// /workspace — from its own container beside the sandbox container.
//
// It creates the /io layout before it listens, so that an open port means
// a ready layout (the Pod's readiness probe is a TCP check). SIGTERM stops
// it gracefully: followers end with UNAVAILABLE and sandboxd follows again.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/sandboxd/sandboxd/orchestrator/backend/kube/iosidecar"
)

// maxTokenFile bounds what is read of --token-file.
const maxTokenFile = 4 << 10

// stopGrace is how long calls in progress get at SIGTERM, inside the Pod's
// terminationGracePeriodSeconds (5).
const stopGrace = 3 * time.Second

func main() {
	if err := run(); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return
		}
		fmt.Fprintln(os.Stderr, "sandbox-iosidecar:", err)
		os.Exit(1)
	}
}

func run() error {
	var cfg iosidecar.Config
	fs := flag.NewFlagSet("sandbox-iosidecar", flag.ContinueOnError)
	listen := fs.String("listen", ":7070", "address to serve sandboxio.v1 on")
	fs.StringVar(&cfg.IODir, "io", "/io", "the sandbox's protocol directory")
	fs.StringVar(&cfg.Workspace, "workspace", "/workspace", "the sandbox's workspace")
	fs.StringVar(&cfg.Volumes, "volumes", "", "where the Pod's named volumes are mounted, each at <dir>/<volume ID> (\"\": none)")
	tokenFile := fs.String("token-file", "", "file holding the shared token (default: env SANDBOXD_IO_TOKEN)")
	fs.Int64Var(&cfg.MaxUploadBytes, "max-upload", iosidecar.DefaultMaxUploadBytes, "the most bytes one upload may have, whatever sandboxd asks")
	egressOn := fs.Bool("egress", false, "run the Pod's egress gateway (a networked sandbox's sidecar): the node's CNI chain (sandbox-cni) redirects the sandbox user's TCP and DNS to it, and sandboxd gives it the sandbox's policy")
	egressSource := fs.String("egress-source", "", "the Pod's IP, the source of the sandbox's redirected traffic (default: env POD_IP)")
	var ec iosidecar.EgressConfig
	fs.StringVar(&ec.TCP, "egress-tcp", iosidecar.DefaultEgressTCP, "where the redirect sends the sandbox user's TCP")
	fs.StringVar(&ec.DNS, "egress-dns", iosidecar.DefaultEgressDNS, "where the redirect sends its DNS (UDP and TCP)")
	fs.StringVar(&ec.Probe, "egress-probe", iosidecar.DefaultEgressProbe, "where the redirect sends the probe's connection")
	fs.StringVar(&ec.ProbeTarget, "egress-probe-target", iosidecar.DefaultEgressProbeTarget, "the address the redirect sends to --egress-probe")
	fs.StringVar(&ec.StateFile, "egress-state", "", "`file` where the gateway keeps the policy in force, in a directory only the sidecar mounts, so that a restarted sidecar puts it back at once (\"\": waits for sandboxd's next use)")
	fs.StringVar(&ec.CADir, "egress-ca-dir", "", "`directory` where the gateway writes the sandbox's own CA certificate ("+iosidecar.CACertFile+") and the image's roots followed by it ("+iosidecar.CABundleFile+"), which the sandbox container mounts and trusts, so that header rules can be applied (\"\": a policy with rules is refused)")
	fs.StringVar(&ec.CAKeyFile, "egress-ca-key", "", "`file` where the gateway keeps its CA's key, in a directory only the sidecar mounts, so that a restarted sidecar keeps the CA the sandbox trusts (\"\": in memory only)")
	fs.StringVar(&ec.Roots, "egress-roots", iosidecar.DefaultRoots, "the image's CA bundle, which the sandbox's bundle extends")
	level := fs.String("log-level", "info", "log level: debug, info, warn, error")
	if err := fs.Parse(os.Args[1:]); err != nil {
		return err
	}
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(*level)); err != nil {
		return fmt.Errorf("bad --log-level: %w", err)
	}
	log := slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: lvl}))
	cfg.Logger = log

	token, err := readToken(*tokenFile)
	if err != nil {
		return err
	}
	cfg.Token = token
	if *egressOn {
		src := *egressSource
		if src == "" {
			src = os.Getenv("POD_IP")
		}
		a, err := netip.ParseAddr(src)
		if err != nil {
			return fmt.Errorf("--egress needs the Pod's IP (--egress-source or env POD_IP): %q: %w", src, err)
		}
		ec.Source = a
		cfg.Egress = &ec
	}

	srv, err := iosidecar.New(cfg) // the /io layout exists from here on
	if err != nil {
		return err
	}
	lis, err := net.Listen("tcp", *listen)
	if err != nil {
		srv.Stop(0)
		return err
	}
	log.Info("io sidecar serving", "addr", lis.Addr().String(), "io", cfg.IODir, "workspace", cfg.Workspace, "volumes", cfg.Volumes, "egress", cfg.Egress != nil)

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	served := make(chan error, 1)
	go func() { served <- srv.GRPC().Serve(lis) }()
	select {
	case err := <-served:
		srv.Stop(0)
		return err
	case <-ctx.Done():
	}
	log.Info("stopping")
	srv.Stop(stopGrace)
	if err := <-served; err != nil && !errors.Is(err, net.ErrClosed) {
		return err
	}
	log.Info("stopped")
	return nil
}

// readToken reads the shared token from file, or from SANDBOXD_IO_TOKEN
// when no file is given; surrounding white space is dropped (a Secret's
// file often ends in a newline).
func readToken(file string) (string, error) {
	var tok string
	if file != "" {
		f, err := os.Open(file)
		if err != nil {
			return "", fmt.Errorf("token file: %w", err)
		}
		defer f.Close()
		b := make([]byte, maxTokenFile+1)
		n, _ := io.ReadFull(f, b)
		if n > maxTokenFile {
			return "", fmt.Errorf("token file %s is larger than %d bytes", file, maxTokenFile)
		}
		tok = string(b[:n])
	} else {
		tok = os.Getenv("SANDBOXD_IO_TOKEN")
	}
	tok = strings.TrimSpace(tok)
	if len(tok) < iosidecar.MinTokenLen {
		return "", fmt.Errorf("the token (--token-file or SANDBOXD_IO_TOKEN) is %d bytes long; at least %d are required", len(tok), iosidecar.MinTokenLen)
	}
	return tok, nil
}
