package main

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/orchestrator/core"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/sandboxd/sandboxd/orchestrator/core/coretest"
	"github.com/sandboxd/sandboxd/orchestrator/door/grpcapi"
	"github.com/sandboxd/sandboxd/orchestrator/door/tokens"
)

const adminToken = "ops-admin-token-0123456789"

// startServerWith serves the real API over fake with server options.
func startServerWith(t *testing.T, fake *coretest.Manager, opts ...grpcapi.Option) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("listen: %v", err)
	}
	srv := grpcapi.NewServer(coretest.Validated(fake), nil, opts...)
	done := make(chan struct{})
	go func() { defer close(done); srv.Serve(lis) }()
	t.Cleanup(func() {
		srv.Stop()
		<-done
	})
	return lis.Addr().String()
}

// runCLIEnv runs sandboxctl with the given environment.
func runCLIEnv(t *testing.T, env map[string]string, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var out, errOut strings.Builder
	code := run(ctx, args, func(k string) string { return env[k] }, strings.NewReader(""), &out, &errOut)
	return result{code, out.String(), errOut.String()}
}

// listAs scripts a fake that reports the caller List saw.
func listAs(seen *core.Caller) *coretest.Manager {
	return &coretest.Manager{ListFunc: func(ctx context.Context, _ core.ListFilter) ([]core.Sandbox, error) {
		*seen, _ = core.CallerFrom(ctx)
		return nil, nil
	}}
}

func TestToken(t *testing.T) {
	toks, err := tokens.Parse(strings.NewReader(adminToken + " ops admin\n"))
	if err != nil {
		t.Fatal(err)
	}
	var seen core.Caller
	addr := startServerWith(t, listAs(&seen), grpcapi.WithTokens(toks))

	r := runCLIEnv(t, nil, "--addr", addr, "list")
	if r.code != exitFailure {
		t.Fatalf("without a token: exit %d", r.code)
	}
	oneLine(t, r.stderr, "sandboxctl: list: this server requires a token")

	r = runCLIEnv(t, nil, "--addr", addr, "--token", "wrong-token-0123456789", "list")
	if r.code != exitFailure {
		t.Fatalf("with a wrong token: exit %d", r.code)
	}
	oneLine(t, r.stderr, "the token is not valid on this server")

	for _, r := range []result{
		runCLIEnv(t, nil, "--addr", addr, "--token", adminToken, "list"),
		runCLIEnv(t, map[string]string{"SANDBOXCTL_ADDR": addr, "SANDBOXCTL_TOKEN": adminToken}, "list"),
	} {
		if r.code != exitOK || seen != (core.Caller{Tenant: "ops", Admin: true, Name: tokens.Fingerprint(adminToken)}) {
			t.Errorf("with the admin token: exit %d (stderr %q), the server saw %+v", r.code, r.stderr, seen)
		}
	}
}

func TestTLS(t *testing.T) {
	dir := t.TempDir()
	certFile, keyFile := filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	writeSelfSigned(t, certFile, keyFile)
	creds, err := credentials.NewServerTLSFromFile(certFile, keyFile)
	if err != nil {
		t.Fatal(err)
	}
	var seen core.Caller
	addr := startServerWith(t, listAs(&seen), grpcapi.WithGRPCOptions(grpc.Creds(creds)))

	if r := runCLIEnv(t, nil, "--addr", addr, "--ca", certFile, "list"); r.code != exitOK {
		t.Errorf("--ca with the server's CA: exit %d, stderr %q", r.code, r.stderr)
	}
	// Plaintext to a TLS server, or a CA that did not sign it, fail.
	if r := runCLIEnv(t, nil, "--addr", addr, "list"); r.code != exitFailure {
		t.Errorf("plaintext to a TLS server: exit %d", r.code)
	}
	if r := runCLIEnv(t, nil, "--addr", addr, "--tls", "list"); r.code != exitFailure || !strings.Contains(r.stderr, "certificate") {
		t.Errorf("system CAs for a self-signed server: exit %d, stderr %q", r.code, r.stderr)
	}
	r := runCLIEnv(t, nil, "--addr", addr, "--ca", filepath.Join(dir, "missing.pem"), "list")
	if r.code != exitUsage || !strings.Contains(r.stderr, "--ca") {
		t.Errorf("missing CA file: exit %d, stderr %q", r.code, r.stderr)
	}
}

// writeSelfSigned writes a self-signed certificate for 127.0.0.1.
func writeSelfSigned(t *testing.T, certFile, keyFile string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "sandboxd test"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		IPAddresses:           []net.IP{net.ParseIP("127.0.0.1")},
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IsCA:                  true,
		BasicConstraintsValid: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kb, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kb}), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := tls.LoadX509KeyPair(certFile, keyFile); err != nil {
		t.Fatal(err)
	}
}
