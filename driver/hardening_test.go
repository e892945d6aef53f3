package driver_test

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/ioproto"
)

// mountIOVolume makes dir a tmpfs of size bytes owned by the sandbox user:
// a size-limited /io like the orchestrator's volumes, without loop devices.
// It needs root (as the container tests do, to chown); it skips otherwise,
// and fails in CI.
func mountIOVolume(t *testing.T, dir string, size int64) {
	t.Helper()
	opts := "size=" + strconv.FormatInt(size, 10) + ",uid=1000,gid=1000,mode=0755"
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", opts, "sandboxd-test-io", dir).CombinedOutput(); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("mount a tmpfs for /io: %v: %s", err, out)
		}
		t.Skipf("cannot mount a tmpfs for /io (needs root): %v: %s", err, out)
	}
	// Registered before the container's clean-up, so it runs after it.
	t.Cleanup(func() {
		if out, err := exec.Command("umount", "-l", dir).CombinedOutput(); err != nil {
			t.Logf("umount %s: %v: %s", dir, err, out)
		}
	})
}

// runtimes are runc and, where installed, gVisor.
func runtimes(t *testing.T) map[string]boxOptions {
	v := map[string]boxOptions{"runc": {}}
	if hasRuntime("runsc") {
		v["runsc"] = boxOptions{runtime: "runsc"}
	} else {
		t.Log("gVisor (runsc) is not registered with Docker; its variant is not run")
	}
	return v
}

// volumeUse returns the bytes used and free on the file system at dir.
func volumeUse(t *testing.T, dir string) (used, free int64) {
	t.Helper()
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		t.Fatal(err)
	}
	return int64(st.Blocks-st.Bfree) * st.Bsize, int64(st.Bavail) * st.Bsize
}

// dirUse returns the bytes the files in dir take on disk.
func dirUse(t *testing.T, dir string) int64 {
	t.Helper()
	var n int64
	filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return nil
		}
		if info, err := d.Info(); err == nil {
			n += info.Sys().(*syscall.Stat_t).Blocks * 512
		}
		return nil
	})
	return n
}

// TestDriverOutputBudget prints 16 MiB of NUL bytes ten times on a 128 MiB
// /io. Escaped for JSON a NUL takes six bytes, so with the cap counting raw
// bytes and 100 commands kept, the second command already filled the volume
// and every later command waited forever. Now the cap counts stored bytes
// and pruning keeps /io/out within its budget, so the volume never fills and
// the next command answers at once.
func TestDriverOutputBudget(t *testing.T) {
	requireDocker(t)
	const volume = 128 << 20
	for name, opts := range runtimes(t) {
		t.Run(name, func(t *testing.T) {
			opts.ioBytes = volume
			b := startBox(t, opts)
			b.py("1")
			st := b.driverStatus()
			if st.OutBudget <= 0 || st.OutBudget > volume/2 || st.MaxOutput <= 0 || st.Health != ioproto.HealthOK {
				t.Fatalf("driver status %+v: want a budget of at most half the volume, a cap and health ok", st)
			}
			out := filepath.Join(b.io, ioproto.OutDir)
			var peakOut, peakVolume int64
			// Sample the volume's use while the commands run, to see the
			// peak (a measurement only; nothing waits on it).
			sampled := make(chan int64)
			stopSampling := make(chan struct{})
			go func() {
				var peak int64
				tick := time.NewTicker(5 * time.Millisecond)
				defer tick.Stop()
				for {
					var st syscall.Statfs_t
					if syscall.Statfs(b.io, &st) == nil {
						peak = max(peak, int64(st.Blocks-st.Bfree)*st.Bsize)
					}
					select {
					case <-tick.C:
					case <-stopSampling:
						sampled <- peak
						return
					}
				}
			}()
			start := time.Now()
			for i := range 10 {
				id := b.submit("bash", "head -c 16777216 /dev/zero", 0)
				d := expectStatus(t, b.wait(id), ioproto.StatusOK, false)
				if !d.OutputTruncated {
					t.Fatalf("command %d: 96 MiB as stored should pass the cap: %+v", i, d)
				}
				used, free := volumeUse(t, b.io)
				outUse := dirUse(t, out)
				peakOut, peakVolume = max(peakOut, outUse), max(peakVolume, used)
				if outUse > st.OutBudget {
					t.Fatalf("after command %d /io/out takes %d bytes, over its budget of %d", i, outUse, st.OutBudget)
				}
				if free < 16<<20 {
					t.Fatalf("after command %d only %d bytes are free on /io", i, free)
				}
			}
			flood := time.Since(start)
			close(stopSampling)
			peakVolume = max(peakVolume, <-sampled)
			if peakVolume > st.OutBudget+8<<20 {
				t.Fatalf("/io peaked at %d bytes; the out budget is %d", peakVolume, st.OutBudget)
			}
			start = time.Now()
			id := b.submit("python", "print(1)", 0)
			evs := b.untilWithin(id, "done of print(1) after the flood", 15*time.Second, isDone)
			expectStatus(t, evs, ioproto.StatusOK, false)
			if got := stdout(evs); got != "1\n" {
				t.Fatalf("print(1) printed %q", got)
			}
			if st := b.driverStatus(); st.Health != ioproto.HealthOK {
				t.Fatalf("driver health after the flood: %+v", st)
			}
			t.Logf("%s: 10 x 16 MiB of NUL in %s; print(1) after it in %s; peak /io/out %.1f MiB (budget %.1f MiB, cap %.1f MiB), peak /io %.1f MiB of %d MiB",
				name, flood.Round(time.Millisecond), time.Since(start).Round(time.Millisecond),
				float64(peakOut)/(1<<20), float64(st.OutBudget)/(1<<20), float64(st.MaxOutput)/(1<<20), float64(peakVolume)/(1<<20), volume>>20)
		})
	}
}

// TestDriverIOFull fills /io from outside the driver (as sandboxed code or
// a growing command log could): a command that cannot start is answered
// with a done saying why, the sandbox reports itself unhealthy in
// /io/driver.json, and both recover once there is room again.
func TestDriverIOFull(t *testing.T) {
	requireDocker(t)
	for name, opts := range runtimes(t) {
		t.Run(name, func(t *testing.T) {
			opts.ioBytes = 32 << 20
			b := startBox(t, opts)
			b.py("1")
			junk := filepath.Join(b.io, "junk")
			fillVolume(t, junk, 256<<10)

			id := b.submit("python", "open('ran.txt', 'w').write('ran')\nprint('ran')", 0)
			evs := b.untilWithin(id, "done of a command on a full /io", 15*time.Second, isDone)
			d := expectStatus(t, evs, ioproto.StatusError, false)
			if !strings.HasPrefix(d.Reason, "/io is full") || !strings.Contains(d.Reason, "not run") {
				t.Fatalf("done reason = %q, want it to say /io is full and the command was not run", d.Reason)
			}
			if _, err := os.Stat(filepath.Join(b.ws, "ran.txt")); err == nil || stdout(evs) != "" {
				t.Fatalf("the command ran: %s", dump(evs))
			}
			if st := b.driverStatus(); st.Health != ioproto.HealthIOFull || !strings.Contains(st.HealthReason, "/io is full") {
				t.Fatalf("driver status %+v, want health io_full with the reason", st)
			}

			if err := os.Remove(junk); err != nil {
				t.Fatal(err)
			}
			b.expectHealthy()

			// Sandboxed code runs as the driver's user and may fill /io
			// itself, while it runs: it still gets its done, the next
			// command is answered without running, and the sandbox says it
			// is unhealthy.
			fill := "with open('/io/junk', 'wb', buffering=0) as f:\n    try:\n        while True:\n            f.write(b'x' * 65536)\n    except OSError as e:\n        print('filled', e.errno)\n    try:\n        while True:\n            f.write(b'x')\n    except OSError:\n        pass\nprint('after')"
			evs = b.untilWithin(b.submit("python", fill, 0), "done of a command that fills /io", 15*time.Second, isDone)
			d = done(t, evs)
			if d.Status != ioproto.StatusOK {
				t.Fatalf("the filling command: %s", dump(evs))
			}
			t.Logf("the command that filled /io: %s", dump(evs))
			evs = b.untilWithin(b.submit("bash", "echo ran > ran.txt", 0), "done of a command after /io was filled", 15*time.Second, isDone)
			d = expectStatus(t, evs, ioproto.StatusError, false)
			if !strings.HasPrefix(d.Reason, "/io is full") {
				t.Fatalf("after the fill: %s", dump(evs))
			}
			if st := b.driverStatus(); st.Health != ioproto.HealthIOFull {
				t.Fatalf("driver status %+v, want health io_full", st)
			}
			// Removed from inside: gVisor keeps its own handle on a file
			// its sandbox wrote, so removing it from the host would not
			// free the space while the sandbox runs.
			if out, err := exec.Command("docker", "exec", b.container, "rm", "/io/junk").CombinedOutput(); err != nil {
				t.Fatalf("remove /io/junk: %v: %s", err, out)
			}
			b.expectHealthy()
			if _, err := os.Stat(filepath.Join(b.io, ioproto.OutDir, ioproto.ReserveFile)); err != nil {
				t.Fatalf("the reserve was not re-created: %v", err)
			}
		})
	}
}

// fillVolume writes path until the volume is full, then gives back leave
// bytes.
func fillVolume(t *testing.T, path string, leave int64) {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	buf := make([]byte, 1<<20)
	for n := len(buf); n > 0; {
		if _, err := f.Write(buf[:n]); err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatal(err)
			}
			n /= 2
		}
	}
	st, err := f.Stat()
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(st.Size() - leave); err != nil {
		t.Fatal(err)
	}
}

// TestDriverForgedSyncMarkers prints bytes that look like the kernel's
// sync markers, in the old form and with a guessed nonce: they are text,
// nothing after them is lost, the command ends ok, and prints and
// display() keep their order.
func TestDriverForgedSyncMarkers(t *testing.T) {
	requireDocker(t)
	forged := []string{
		`\x00\x1eSBX-SYNC:99\x1e\x00`,
		`\x00\x1eSBX-SYNC:0123456789abcdef0123456789abcdef:99\x1e\x00`,
		`\x00\x1eSBX-SYNC:` + strings.Repeat("f", 32) + `:3\x1e\x00`,
	}
	code := "import sys\n"
	var want []string
	for i, f := range forged {
		code += fmt.Sprintf("print('p%d')\nsys.stdout.write('%s')\nsys.stderr.write('%s')\nprint('after%d', flush=True)\ndisplay(%d)\n", i, f, f, i, i)
		want = append(want, fmt.Sprintf("p%d", i), "F", fmt.Sprintf("after%d", i), fmt.Sprintf("d %d", i))
	}
	code += "print('end')"
	want = append(want, "end")
	for name, opts := range runtimes(t) {
		t.Run(name, func(t *testing.T) {
			b := startBox(t, opts)
			evs := b.py(code)
			expectStatus(t, evs, ioproto.StatusOK, false)
			var order []string
			var text, errText strings.Builder
			flush := func() {
				for _, l := range strings.Split(strings.TrimSuffix(text.String(), "\n"), "\n") {
					// A forged marker, whole, becomes "F".
					for l != "" {
						before, rest, found := strings.Cut(l, "\x00\x1eSBX-SYNC:")
						if before != "" {
							order = append(order, before)
						}
						if !found {
							break
						}
						order = append(order, "F")
						_, l, found = strings.Cut(rest, "\x1e\x00")
						if !found {
							order = append(order, "unterminated marker")
							break
						}
					}
				}
				text.Reset()
			}
			for _, e := range evs {
				switch e.Type {
				case ioproto.EventStdout:
					text.WriteString(e.Text)
				case ioproto.EventStderr:
					errText.WriteString(e.Text)
				case ioproto.EventDisplay:
					flush()
					order = append(order, "d "+e.Data["text/plain"])
				}
			}
			flush()
			if strings.Join(order, "|") != strings.Join(want, "|") {
				t.Fatalf("output lost or out of order:\n got %q\nwant %q\n%s", order, want, dump(evs))
			}
			var wantErr string
			for _, f := range forged {
				s, _ := strconv.Unquote(`"` + f + `"`)
				wantErr += s
			}
			if errText.String() != wantErr {
				t.Fatalf("stderr = %q, want the forged markers as text", errText.String())
			}
			if got := stdout(b.py("print('next')")); got != "next\n" {
				t.Fatalf("the next command printed %q", got)
			}
		})
	}
}

// expectHealthy runs print(1), which must work, and then finds the
// driver healthy.
func (b *box) expectHealthy() {
	b.t.Helper()
	evs := b.untilWithin(b.submit("python", "print(1)", 0), "done once /io has room", 15*time.Second, isDone)
	expectStatus(b.t, evs, ioproto.StatusOK, false)
	if got := stdout(evs); got != "1\n" {
		b.t.Fatalf("print(1) printed %q", got)
	}
	if st := b.driverStatus(); st.Health != ioproto.HealthOK {
		b.t.Fatalf("driver status %+v, want health ok again", st)
	}
}
