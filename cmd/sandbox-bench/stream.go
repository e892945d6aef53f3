package main

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"time"
)

// streamLine is what the streaming command prints, over and over: 64
// characters and a newline.
const streamLine = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ+/"

// stream runs one bash command that prints StreamMB megabytes and measures
// how fast the output arrives through sandboxd and how much memory
// sandboxd needs meanwhile; docker exec streaming the same output is the
// peer.
func (b *bench) stream(ctx context.Context) error {
	size := int64(b.cfg.StreamMB) * 1_000_000
	script := fmt.Sprintf("yes %s | head -c %d", streamLine, size)
	// The driver caps a command's output (16 MiB by default); this sandbox
	// is allowed all of it, or there is nothing to measure.
	env := map[string]string{"SANDBOX_MAX_OUTPUT": strconv.FormatInt(2*size+1<<20, 10)}
	sb, err := b.newSandbox(ctx, "stream", env)
	if err == nil {
		_, err = b.c.exec(ctx, sb, "bash", "true")
	}
	if err != nil {
		b.fail(err, mStream, mStreamRSS)
		return err
	}
	pid := b.cfg.pid
	if b.d != nil {
		pid = b.d.pid()
	}

	var peakSampled, baseRSS, hwmBefore int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	if pid > 0 {
		baseRSS, hwmBefore, _ = processMemory(pid)
		wg.Go(func() {
			t := time.NewTicker(5 * time.Millisecond)
			defer t.Stop()
			for {
				if rss, _, err := processMemory(pid); err == nil {
					peakSampled = max(peakSampled, rss)
				}
				select {
				case <-stop:
					return
				case <-t.C:
				}
			}
		})
	}
	start := time.Now()
	res, err := b.c.exec(ctx, sb, "bash", script)
	elapsed := time.Since(start)
	close(stop)
	wg.Wait()
	if err != nil {
		b.fail(err, mStream, mStreamRSS)
		return err
	}
	if res.outputBytes != size {
		err := fmt.Errorf("received %d bytes of output, want %d (is the driver's output cap in the way?)", res.outputBytes, size)
		b.fail(err, mStream, mStreamRSS)
		return err
	}
	rate := float64(size) / 1e6 / elapsed.Seconds()

	b.progress("peer: docker exec streaming")
	peer := nan
	note := fmt.Sprintf("%d MB as %d events (one bash command: yes | head -c), Execute call to done; the peer reads docker exec's stdout", b.cfg.StreamMB, res.events)
	if ctr, err := containerOf(ctx, sb); err != nil {
		note += "; docker exec peer failed: " + err.Error()
	} else if p, err := dockerExecStream(ctx, ctr, script, size); err != nil {
		note += "; docker exec peer failed: " + err.Error()
	} else {
		peer = p / 1e6
	}
	b.rep.add(row(mStream, rate, "docker exec, same command", peer, atLeast(100, "≥ 100 MB/s"), note))

	if pid == 0 {
		b.rep.add(row(mStreamRSS, nan, "", nan, &target{text: "< 100 MiB", ok: func(v float64, _ *float64) bool { return v < 100 }},
			"not measured: sandboxd at --addr; pass its --pid"))
		return nil
	}
	_, hwmAfter, _ := processMemory(pid)
	peak, how := peakSampled, "highest VmRSS sampled every 5 ms (the process's VmHWM predates the stream)"
	if hwmAfter > hwmBefore {
		peak, how = hwmAfter, "VmHWM: the stream set the process's peak"
	}
	b.rep.add(row(mStreamRSS, float64(peak)/mib, "", nan, &target{text: "< 100 MiB", ok: func(v float64, _ *float64) bool { return v < 100 }},
		fmt.Sprintf("%s; RSS before the stream %s MiB", how, fmtNum(float64(baseRSS)/mib))))
	return nil
}
