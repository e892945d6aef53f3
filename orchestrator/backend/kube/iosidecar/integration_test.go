package iosidecar

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/internal/testenv"
	"github.com/sandboxd/sandboxd/ioproto"
)

// TestSandboxImage runs the sidecar from the sandbox image the way a Pod
// does — its own container, root with CHOWN, DAC_OVERRIDE and FOWNER only,
// a read-only root — beside the driver's container (uid 1000), sharing
// /io and /workspace, and runs commands and moves files through it. Use
// SANDBOX_IMAGE to name an image built with the sidecar (make image).
func TestSandboxImage(t *testing.T) {
	img := testenv.NeedDocker(t)
	if out, err := exec.Command("docker", "run", "--rm", "--entrypoint", "/usr/local/bin/sandbox-iosidecar", img, "--help").CombinedOutput(); err != nil {
		testenv.Unavailable(t, "image %s has no io sidecar (run `make image`, or set SANDBOX_IMAGE): %v: %s", img, err, bytes.TrimSpace(out))
	}
	var rnd [6]byte
	rand.Read(rnd[:])
	prefix := "sbx-iosidecar-test-" + hex.EncodeToString(rnd[:])
	dir := t.TempDir()
	ioDir, ws := filepath.Join(dir, "io"), filepath.Join(dir, "workspace")
	for _, d := range []string{ioDir, ws} {
		// A fresh volume's root: root's, 0755. The sidecar gives it to
		// the sandbox user (an emptyDir, 0777, needs nothing more).
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	docker := func(args ...string) string {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		out, err := exec.CommandContext(ctx, "docker", args...).CombinedOutput()
		if err != nil {
			t.Fatalf("docker %s: %v: %s", strings.Join(args, " "), err, out)
		}
		return strings.TrimSpace(string(out))
	}
	mounts := []string{"-v", ioDir + ":/io", "-v", ws + ":/workspace"}
	sidecar, driver := prefix+"-io", prefix+"-sandbox"
	t.Cleanup(func() {
		if t.Failed() {
			out, _ := exec.Command("docker", "logs", sidecar).CombinedOutput()
			t.Logf("sidecar logs:\n%s", out)
		}
		exec.Command("docker", "rm", "-f", sidecar, driver).Run()
	})
	docker(append(append([]string{"run", "-d", "--name", sidecar, "--user", "0", "--read-only",
		"--cap-drop", "ALL", "--cap-add", "CHOWN", "--cap-add", "DAC_OVERRIDE", "--cap-add", "FOWNER",
		"--security-opt", "no-new-privileges", "-e", "SANDBOXD_IO_TOKEN=" + testToken,
		"-p", "127.0.0.1::7070", "--entrypoint", "/usr/local/bin/sandbox-iosidecar"}, mounts...),
		img, "--listen=:7070", "--io=/io", "--workspace=/workspace")...)
	addr := docker("port", sidecar, "7070/tcp")
	addr = strings.Fields(addr)[0]
	c, err := Dial(addr, testToken)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	testenv.WaitServing(t, c.Conn())

	docker(append(append([]string{"run", "-d", "--name", driver, "--init", "--network", "none", "--read-only",
		"--tmpfs", "/tmp", "--cap-drop", "ALL", "--security-opt", "no-new-privileges"}, mounts...), img)...)

	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	run := func(id, lang, code string) (stdout string, done ioproto.Event) {
		t.Helper()
		if _, err := c.Append(ctx, ioproto.Record{Type: ioproto.KindExec, CommandID: id, Language: lang, Code: code}); err != nil {
			t.Fatalf("Append %s: %v", id, err)
		}
		var out strings.Builder
		err := c.Follow(ctx, id, 0, func(ev ioproto.Event) error {
			switch ev.Type {
			case ioproto.EventStdout:
				out.WriteString(ev.Text)
			case ioproto.EventDone:
				done = ev
			}
			return nil
		})
		if err != nil {
			t.Fatalf("Follow %s: %v", id, err)
		}
		return out.String(), done
	}
	if out, done := run("py1", ioproto.LanguagePython, "x = 20\nprint(x + 22)"); out != "42\n" || done.Status != ioproto.StatusOK {
		t.Fatalf("python command: stdout %q, done %+v", out, done)
	}
	if _, err := c.Upload(ctx, "in/data.txt", strings.NewReader("from sandboxd"), 0); err != nil {
		t.Fatal(err)
	}
	if out, done := run("sh1", ioproto.LanguageBash, "id -u; cat /workspace/in/data.txt; echo made > /workspace/out.txt"); out != "1000\nfrom sandboxd" || done.Status != ioproto.StatusOK {
		t.Fatalf("bash command: stdout %q, done %+v", out, done)
	}
	r, fi, err := c.Download(ctx, "/workspace/out.txt")
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(r)
	r.Close()
	if err != nil || string(got) != "made\n" || fi.UID != 1000 {
		t.Fatalf("Download of the command's file = %q (%+v), %v", got, fi, err)
	}
	ds, err := c.DriverStatus(ctx)
	if err != nil || ds.Boot < 1 {
		t.Fatalf("DriverStatus = %+v, %v", ds, err)
	}
	// A restarted sidecar keeps the log: the commands are still there.
	docker("restart", "-t", "5", sidecar)
	addr = strings.Fields(docker("port", sidecar, "7070/tcp"))[0]
	c2, err := Dial(addr, testToken)
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	testenv.WaitServing(t, c2.Conn())
	if ok, err := c2.Append(ctx, ioproto.Record{Type: ioproto.KindExec, CommandID: "py1", Language: ioproto.LanguagePython, Code: "x = 20\nprint(x + 22)"}); ok || err != nil {
		t.Fatalf("Append of a logged command after a sidecar restart = %v, %v; want not appended", ok, err)
	}
	var seqs []int64
	if err := c2.Follow(ctx, "py1", 0, func(ev ioproto.Event) error { seqs = append(seqs, ev.Seq); return nil }); err != nil || len(seqs) < 3 {
		t.Fatalf("Follow after a sidecar restart = seqs %v, %v", seqs, err)
	}
}
