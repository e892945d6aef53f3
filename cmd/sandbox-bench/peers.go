package main

import (
	"bytes"
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// peerCode is the stateless peers' version of the warm round trip: without a
// persistent interpreter, the state has to be rebuilt on every call.
const peerCode = "x = 21; print(x * 2)"

// dockerExecOnce runs code in a running container the way stateless designs
// do it: one `docker exec … python3 -c` per call.
func dockerExecOnce(ctx context.Context, containerID string) error {
	out, err := exec.CommandContext(ctx, "docker", "exec", containerID, "python3", "-c", peerCode).CombinedOutput()
	if err != nil {
		return fmt.Errorf("docker exec: %v: %s", err, bytes.TrimSpace(out))
	}
	if strings.TrimSpace(string(out)) != "42" {
		return fmt.Errorf("docker exec printed %q, want 42", out)
	}
	return nil
}

// dockerExecLatency times n calls of dockerExecOnce.
func dockerExecLatency(ctx context.Context, containerID string, n int) (latencies, error) {
	var l latencies
	for range n {
		start := time.Now()
		if err := dockerExecOnce(ctx, containerID); err != nil {
			return nil, err
		}
		l = append(l, time.Since(start))
	}
	return l, nil
}

// dockerRunLatency times n fresh containers, each running the code and being
// removed: a container per call, with the sandboxes' image and runtime.
func dockerRunLatency(ctx context.Context, image, runtime string, n int) (latencies, error) {
	args := []string{"run", "--rm", "--network", "none", "--entrypoint", "python3"}
	if runtime != "" {
		args = append(args, "--runtime", runtime)
	}
	args = append(args, image, "-c", peerCode)
	var l latencies
	for range n {
		start := time.Now()
		out, err := exec.CommandContext(ctx, "docker", args...).CombinedOutput()
		if err != nil {
			return nil, fmt.Errorf("docker run: %v: %s", err, bytes.TrimSpace(out))
		}
		l = append(l, time.Since(start))
		if strings.TrimSpace(string(out)) != "42" {
			return nil, fmt.Errorf("docker run printed %q, want 42", out)
		}
	}
	return l, nil
}

// dockerExecThroughput runs dockerExecOnce from one goroutine per container
// for d and returns the completed calls per second.
func dockerExecThroughput(ctx context.Context, containers []string, d time.Duration) (float64, int64, error) {
	var done, failed atomic.Int64
	var firstErr error
	var once sync.Once
	deadline := time.Now().Add(d)
	start := time.Now()
	var wg sync.WaitGroup
	for _, c := range containers {
		wg.Go(func() {
			for time.Now().Before(deadline) && ctx.Err() == nil {
				if err := dockerExecOnce(ctx, c); err != nil {
					failed.Add(1)
					once.Do(func() { firstErr = err })
					continue
				}
				done.Add(1)
			}
		})
	}
	wg.Wait()
	if done.Load() == 0 && firstErr != nil {
		return 0, failed.Load(), firstErr
	}
	return float64(done.Load()) / time.Since(start).Seconds(), failed.Load(), nil
}

// dockerExecStream streams the same output as the streaming benchmark out
// of a container with `docker exec`, and returns its throughput in bytes per
// second.
func dockerExecStream(ctx context.Context, containerID, script string, want int64) (float64, error) {
	cmd := exec.CommandContext(ctx, "docker", "exec", containerID, "bash", "-c", script)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return 0, err
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	start := time.Now()
	if err := cmd.Start(); err != nil {
		return 0, err
	}
	n, cerr := io.Copy(io.Discard, stdout)
	if err := cmd.Wait(); err != nil {
		return 0, fmt.Errorf("docker exec: %v: %s", err, bytes.TrimSpace(stderr.Bytes()))
	}
	elapsed := time.Since(start)
	if cerr != nil {
		return 0, cerr
	}
	if n != want {
		return 0, fmt.Errorf("docker exec streamed %d bytes, want %d", n, want)
	}
	return float64(n) / elapsed.Seconds(), nil
}

//go:embed jupyter_rtt.py
var jupyterScript []byte

// jupyterResult is what jupyter_rtt.py prints.
type jupyterResult struct {
	SamplesNS      []int64 `json:"samples_ns"`
	KernelRSSBytes int64   `json:"kernel_rss_bytes"`
}

// errNoJupyter says the Jupyter peer cannot run here.
var errNoJupyter = errors.New("jupyter_client and ipykernel are not installed for this Python (Debian: apt-get install python3-ipykernel python3-jupyter-client)")

// jupyterLatency times n round trips against a local ipykernel kernel,
// driven by jupyter_client, with python.
func jupyterLatency(ctx context.Context, python string, n, warmup int) (latencies, int64, error) {
	if err := exec.CommandContext(ctx, python, "-c", "import jupyter_client, ipykernel").Run(); err != nil {
		return nil, 0, errNoJupyter
	}
	dir, err := os.MkdirTemp("", "sandbox-bench-jupyter-")
	if err != nil {
		return nil, 0, err
	}
	defer os.RemoveAll(dir)
	script := filepath.Join(dir, "jupyter_rtt.py")
	if err := os.WriteFile(script, jupyterScript, 0o644); err != nil {
		return nil, 0, err
	}
	cmd := exec.CommandContext(ctx, python, script, fmt.Sprint(n), fmt.Sprint(warmup))
	cmd.Dir = dir // the kernel's working directory; nothing of ours on its path
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, 0, fmt.Errorf("jupyter round trips: %v: %s", err, lastLines(stderr.String(), 5))
	}
	var res jupyterResult
	if err := json.Unmarshal(out, &res); err != nil {
		return nil, 0, fmt.Errorf("jupyter round trips printed %q: %w", out, err)
	}
	l := make(latencies, len(res.SamplesNS))
	for i, ns := range res.SamplesNS {
		l[i] = time.Duration(ns)
	}
	return l, res.KernelRSSBytes, nil
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return strings.Join(lines[max(len(lines)-n, 0):], "\n")
}
