package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"

	sandboxclient "github.com/sandboxd/sandboxd/client"
)

// The volume figures: a named volume's file throughput, inside a sandbox
// and through the API, next to /workspace's in the same run and the same
// sandbox. Both are ext4 in a loop-mounted sparse image, so the figures
// show what the volume's extra bind mount (and, outside, the volume calls)
// cost: nothing measurable is the expected answer.
var (
	// Their names get the size (--volume-mb).
	mVolWrite    = metric{"volume_write", "inside a sandbox: write %d MB to a volume, then fsync", "MB/s", false, "faster", "slower"}
	mVolRead     = metric{"volume_read", "inside a sandbox: read the %d MB back", "MB/s", false, "faster", "slower"}
	mVolUpload   = metric{"volume_upload", "UploadVolumeFile of %d MB", "MB/s", false, "faster", "slower"}
	mVolDownload = metric{"volume_download", "DownloadVolumeFile of %d MB", "MB/s", false, "faster", "slower"}
)

// volIO writes n bytes to dir/f in 1 MiB blocks with an fsync, then reads
// them back, and prints both times in seconds.
const volIO = `import os, time
b = os.urandom(1 << 20)
n = %d
t = time.perf_counter()
with open('%s/bench.bin', 'wb') as f:
    left = n
    while left > 0:
        f.write(b[:min(left, len(b))]); left -= len(b)
    f.flush(); os.fsync(f.fileno())
w = time.perf_counter() - t
t = time.perf_counter()
with open('%s/bench.bin', 'rb') as f:
    while f.read(1 << 20): pass
r = time.perf_counter() - t
os.remove('%s/bench.bin')
print(w, r)
`

// volumes measures a volume against /workspace, inside a sandbox that
// mounts it and through the files API.
func (b *bench) volumes(ctx context.Context) error {
	mWrite, mRead, mUp, mDown := mVolWrite, mVolRead, mVolUpload, mVolDownload
	for _, m := range []*metric{&mWrite, &mRead, &mUp, &mDown} {
		m.name = fmt.Sprintf(m.name, b.cfg.VolumeMB)
	}
	all := []metric{mWrite, mRead, mUp, mDown}
	n := int64(b.cfg.VolumeMB) * 1_000_000
	name := "bench-" + b.runID
	size := max(2*n+(64<<20), 64<<20)
	if _, err := b.c.sb.CreateVolume(ctx, name, size); err != nil {
		b.fail(err, all...)
		return err
	}
	defer b.c.sb.DeleteVolume(context.WithoutCancel(ctx), name, true)
	acq, err := b.c.sb.Acquire(ctx, b.user("volumes"), sandboxclient.WithVolume(name, "/mnt/bench", false))
	if err != nil {
		b.fail(err, all...)
		return err
	}
	b.mu.Lock()
	b.created = append(b.created, acq.ID)
	b.mu.Unlock()

	const rounds = 5
	var wWS, rWS, wVol, rVol, upWS, upVol, downWS, downVol []float64
	data := bytes.Repeat([]byte("sandboxd volume bench "), int(n/22)+1)[:n]
	for i := range rounds {
		dirs := []string{"/workspace", "/mnt/bench"}
		if i%2 == 1 {
			slices.Reverse(dirs) // neither always first
		}
		for _, dir := range dirs {
			out, err := b.c.execStdout(ctx, acq.ID, "python", fmt.Sprintf(volIO, n, dir, dir, dir))
			if err != nil {
				b.fail(err, all...)
				return err
			}
			f := strings.Fields(out)
			if len(f) != 2 {
				err := fmt.Errorf("volume bench in %s printed %q", dir, out)
				b.fail(err, all...)
				return err
			}
			w, _ := strconv.ParseFloat(f[0], 64)
			r, _ := strconv.ParseFloat(f[1], 64)
			if dir == "/workspace" {
				wWS, rWS = append(wWS, float64(n)/1e6/w), append(rWS, float64(n)/1e6/r)
			} else {
				wVol, rVol = append(wVol, float64(n)/1e6/w), append(rVol, float64(n)/1e6/r)
			}
		}
	}
	// Through the API, after the writes inside (whose writeback they would
	// otherwise share): UploadFile and Download against the volume calls.
	for range rounds {
		start := time.Now()
		if _, err := b.c.sb.Upload(ctx, acq.ID, "api.bin", bytes.NewReader(data)); err != nil {
			b.fail(err, mUp, mDown)
			return err
		}
		upWS = append(upWS, float64(n)/1e6/time.Since(start).Seconds())
		start = time.Now()
		if _, err := b.c.sb.UploadVolumeFile(ctx, name, "api.bin", bytes.NewReader(data), true); err != nil {
			b.fail(err, mUp, mDown)
			return err
		}
		upVol = append(upVol, float64(n)/1e6/time.Since(start).Seconds())
		start = time.Now()
		if _, err := b.c.sb.Download(ctx, acq.ID, "api.bin", io.Discard); err != nil {
			b.fail(err, mDown)
			return err
		}
		downWS = append(downWS, float64(n)/1e6/time.Since(start).Seconds())
		start = time.Now()
		if _, err := b.c.sb.DownloadVolumeFile(ctx, name, "api.bin", io.Discard); err != nil {
			b.fail(err, mDown)
			return err
		}
		downVol = append(downVol, float64(n)/1e6/time.Since(start).Seconds())
	}
	note := fmt.Sprintf("median of %d rounds of %d MB, /workspace in the same sandbox beside it", rounds, b.cfg.VolumeMB)
	b.rep.add(row(mWrite, median(wVol), "/workspace (same sandbox, median)", median(wWS), nil, note+"; 1 MiB writes, then fsync"))
	b.rep.add(row(mRead, median(rVol), "/workspace (same sandbox, median)", median(rWS), nil, "1 MiB reads, just after the write (the page cache's, as a program re-reading its data sees)"))
	b.rep.add(row(mUp, median(upVol), "UploadFile to /workspace (median)", median(upWS), nil, note+"; gRPC over loopback"))
	b.rep.add(row(mDown, median(downVol), "DownloadFile from /workspace (median)", median(downWS), nil, ""))
	return b.deleteSandbox(ctx, acq.ID)
}

// median is the middle of xs (of an odd count; the upper middle else).
func median(xs []float64) float64 {
	if len(xs) == 0 {
		return nan
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[len(s)/2]
}
