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
	"io"
	"log/slog"
	"math/big"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/orchestrator/core"
	"github.com/sandboxd/sandboxd/orchestrator/core/coretest"
)

// TestServePortsTLS: with --ports-tls-cert/key the front serves HTTPS and
// negotiates HTTP/2 over it; the traffic secret is made in the state
// directory (0600) and the same after a restart.
func TestServePortsTLS(t *testing.T) {
	dir := t.TempDir()
	certFile, keyFile := writeCert(t, dir, "*.sandboxes.test")
	app := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "app "+r.Proto) })}
	appLis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go app.Serve(appLis)
	t.Cleanup(func() { app.Close() })
	fake := &coretest.Manager{PortTargetFunc: func(context.Context, string, int, bool) (core.PortTarget, error) {
		return core.PortTarget{State: core.StateRunning, Public: true, Addr: netip.MustParseAddrPort(appLis.Addr().String())}, nil
	}}

	p := portsFlags{listen: "127.0.0.1:0", domain: "sandboxes.test", tlsCert: certFile, tlsKey: keyFile, maxPerSandbox: 4, maxPerTenant: 8, max: 8}
	lis, err := net.Listen("tcp", p.listen)
	if err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.DiscardHandler)
	cfg := config{ports: p}
	cfg.docker.StateDir = filepath.Join(dir, "state")
	front, err := newPortsFront(cfg, lis, log)
	if err != nil {
		t.Fatal(err)
	}
	if st, err := os.Stat(filepath.Join(dir, "state", portsSecretFile)); err != nil || st.Mode().Perm() != 0o600 {
		t.Errorf("the secret file: %v, %v", st, err)
	}
	again, err := newPortsFront(cfg, lis, log)
	if err != nil || again.Token("sb-aaaaaaaaaaaaaaaaaaaa") != front.Token("sb-aaaaaaaaaaaaaaaaaaaa") {
		t.Errorf("the tokens changed across a restart (%v)", err)
	}
	_, stop, err := servePorts(lis, front, coretest.ValidatedWith(fake, coretest.NetworkPolicy()), p, config{shutdownTimeout: time.Second}, log)
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	url := "https://8080-sb-aaaaaaaaaaaaaaaaaaaa.sandboxes.test:" + lis.Addr().(*net.TCPAddr).AddrPort().String()[len("127.0.0.1:"):] + "/"
	if got := front.URL("sb-aaaaaaaaaaaaaaaaaaaa", 8080); got != url {
		t.Errorf("URL %q; want %q", got, url)
	}
	pool := x509.NewCertPool()
	certPEM, _ := os.ReadFile(certFile)
	pool.AppendCertsFromPEM(certPEM)
	client := &http.Client{Transport: &http.Transport{ForceAttemptHTTP2: true,
		TLSClientConfig: &tls.Config{RootCAs: pool},
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "tcp", lis.Addr().String())
		}}}
	resp, err := client.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || resp.ProtoMajor != 2 || string(b) != "app HTTP/1.1" {
		t.Errorf("over TLS: %d %s %q; want 200 over HTTP/2", resp.StatusCode, resp.Proto, b)
	}
}

// writeCert writes a self-signed certificate for host and its key.
func writeCert(t *testing.T, dir, host string) (certFile, keyFile string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: host}, DNSNames: []string{host},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kb, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600)
	os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}), 0o600)
	return certFile, keyFile
}

// TestPortsOnKubernetes: --ports-listen is accepted with --backend
// kubernetes and --kube-egress-cni, refused without the plugin, and every
// replica holding the io sidecars' token keys the traffic tokens alike
// (a URL one replica gave is served by any), with another secret than the
// E2B door's.
func TestPortsOnKubernetes(t *testing.T) {
	dir := t.TempDir()
	tok := filepath.Join(dir, "token")
	os.WriteFile(tok, []byte("io-token-one-0123456789\n"), 0o600)
	kubeArgs := []string{"--backend", "kubernetes", "--kube-io-token-file", tok, "--allow-network", "--ports-listen", "127.0.0.1:0"}
	if _, err := parseConfig(kubeArgs, env("HOME", "/root"), io.Discard); err == nil || !strings.Contains(err.Error(), "--kube-egress-cni") {
		t.Errorf("--ports-listen on kubernetes without --kube-egress-cni: %v; want refused naming it", err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer lis.Close()
	var tokens []string
	for _, replica := range []string{"a", "b"} {
		c, err := parseConfig(append(kubeArgs, "--kube-egress-cni", "--state-dir", filepath.Join(dir, replica)), env("HOME", "/root"), io.Discard)
		if err != nil {
			t.Fatalf("parseConfig: %v", err)
		}
		f, err := newPortsFront(c, lis, slog.New(slog.DiscardHandler))
		if err != nil {
			t.Fatalf("newPortsFront: %v", err)
		}
		tokens = append(tokens, f.Token("sb-aaaaaaaaaaaaaaaaaaaa"))
		e2b, _ := e2bSecret(c)
		if f.Token("sb-aaaaaaaaaaaaaaaaaaaa") == e2bTokenUnder(e2b) {
			t.Error("the ports' secret is the E2B door's")
		}
	}
	if tokens[0] != tokens[1] {
		t.Errorf("two replicas with one io token gave tokens %s and %s; want one", tokens[0], tokens[1])
	}
}

// e2bTokenUnder is what a traffic token would be under the E2B door's
// secret.
func e2bTokenUnder(secret []byte) string {
	f, err := core.NewPortsFront("http://127.0.0.1:1", "", secret)
	if err != nil {
		return ""
	}
	return f.Token("sb-aaaaaaaaaaaaaaaaaaaa")
}
