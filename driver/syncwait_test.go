package driver

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/ioproto"
)

// scriptedKernel is a kernel whose control messages and output the test
// sends itself, at the pace it chooses, into a running driver: the
// driver's half of the kernel protocol without an interpreter's timing.
// It is the default context's Node.js kernel; its process is a sleep in a
// group of its own, for the driver to kill at the end.
type scriptedKernel struct {
	k   *kernel
	req *bufio.Reader // the requests the driver sends
}

func startScriptedKernel(t *testing.T, h *driverHarness, d *Driver) *scriptedKernel {
	t.Helper()
	// The default context exists, and its executor runs, once a command
	// has finished.
	wantDone(t, h.submitRec(ioproto.Record{CommandID: "scripted-setup", Language: ioproto.LanguageBash, Code: "true"}), ioproto.StatusOK)
	cmd := exec.Command("sleep", "600")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	ctrlR, ctrlW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ctrlR.Close() })
	k := &kernel{spec: kernelSpecs[kindNode], cmd: cmd, ctrl: ctrlW,
		output: make(chan outputItem, 64), msgs: make(chan kernelMsg, 16),
		exited: make(chan struct{}), stop: make(chan struct{}), log: d.log}
	go func() {
		_ = cmd.Wait()
		k.state = cmd.ProcessState
		close(k.exited)
	}()
	t.Cleanup(func() { _ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) })
	d.mu.Lock()
	c := d.contexts[ioproto.DefaultContext]
	d.mu.Unlock()
	d.setKernel(c, kindNode, k)
	return &scriptedKernel{k: k, req: bufio.NewReader(ctrlR)}
}

// request waits for the driver's next request and returns its command ID.
func (s *scriptedKernel) request(t *testing.T) string {
	t.Helper()
	got := make(chan string, 1)
	go func() {
		line, _ := s.req.ReadString('\n')
		got <- line
	}()
	select {
	case line := <-got:
		var req kernelRequest
		if err := json.Unmarshal([]byte(line), &req); err != nil {
			t.Fatalf("request %q: %v", line, err)
		}
		return req.ID
	case <-time.After(30 * time.Second):
		t.Fatal("the driver sent the kernel no request within 30s")
	}
	return ""
}

// TestSyncWaitWhileOutputArrives: a control message waits for its markers
// as long as the output before them keeps arriving, however slowly the
// driver gets to read it (here 20 pieces 50 ms apart, twice syncWait in
// all: a driver starved of CPU by the sandbox's busy processes). Before,
// done was emitted syncWait after it arrived, the rest of the output went
// to the next command; the markers are still not waited for forever.
func TestSyncWaitWhileOutputArrives(t *testing.T) {
	var d *Driver
	h := startDriver(t, t.TempDir(), func(dd *Driver) {
		d = dd
		dd.launcher.languages = append(dd.launcher.languages, ioproto.LanguageJavaScript)
	})
	s := startScriptedKernel(t, h, d)

	const pieces = 20
	h.submit("slow", ioproto.LanguageJavaScript, "slow output")
	id := s.request(t)
	// The kernel wrote its output, then the markers, then done; the driver
	// reads done at once, the output and markers bit by bit.
	s.k.msgs <- kernelMsg{Type: "done", ID: id, Sync: 1, Status: ioproto.StatusOK}
	var want strings.Builder
	for i := range pieces {
		line := fmt.Sprintf("piece %d\n", i)
		want.WriteString(line)
		s.k.output <- outputItem{stream: ioproto.EventStdout, text: line}
		time.Sleep(2 * syncWait / pieces)
	}
	s.k.output <- outputItem{stream: ioproto.EventStdout, sync: 1}
	s.k.output <- outputItem{stream: ioproto.EventStderr, sync: 1}
	evs := h.wait("slow")
	if got := textOf(evs, ioproto.EventStdout); got != want.String() {
		t.Errorf("stdout before done: %q; want all %d pieces, %q", got, pieces, want.String())
	}
	wantDone(t, evs, ioproto.StatusOK)

	// Markers that never come (the user's code broke the kernel's
	// descriptors) hold done back only for syncWait of silence.
	h.submit("lost", ioproto.LanguageJavaScript, "markers lost")
	id = s.request(t)
	start := time.Now()
	s.k.output <- outputItem{stream: ioproto.EventStdout, text: "only\n"}
	s.k.msgs <- kernelMsg{Type: "done", ID: id, Sync: 2, Status: ioproto.StatusOK}
	evs = h.wait("lost")
	wantDone(t, evs, ioproto.StatusOK)
	if took := time.Since(start); took > syncWaitMax {
		t.Errorf("done without its markers took %v; want it after about %v of silence", took, syncWait)
	}
	if got := textOf(evs, ioproto.EventStdout); got != "only\n" {
		t.Errorf("stdout %q; want %q", got, "only\n")
	}
}
