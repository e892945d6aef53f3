package iolog

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/google/uuid"
	"github.com/sandboxd/sandboxd/ioproto"
)

func TestZZIndexMemory(t *testing.T) {
	d := newDir(t)
	var buf bytes.Buffer
	for i := 0; i < MaxLogRecords; i++ {
		line, _ := ioproto.EncodeRecord(ioproto.Record{Type: ioproto.KindExec, CommandID: uuid.NewString(), Language: "bash", Code: "echo hi"})
		buf.Write(line)
	}
	os.WriteFile(filepath.Join(d.Path(), ioproto.StdinFile), buf.Bytes(), 0o644)
	runtime.GC()
	var a, b runtime.MemStats
	runtime.ReadMemStats(&a)
	if err := d.Load(context.Background()); err != nil {
		t.Fatal(err)
	}
	runtime.GC()
	runtime.ReadMemStats(&b)
	t.Logf("index of %d commands: %d bytes, %d per command", MaxLogRecords, b.HeapAlloc-a.HeapAlloc, (b.HeapAlloc-a.HeapAlloc)/MaxLogRecords)
	runtime.KeepAlive(d)
}
