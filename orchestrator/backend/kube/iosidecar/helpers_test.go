package iosidecar

import (
	"io/fs"
	"syscall"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"

	sandboxiov1 "github.com/sandboxd/sandboxd/proto/sandboxio/v1"
)

type sandboxAppendReq = sandboxiov1.AppendRequest

func insecureCreds() credentials.TransportCredentials { return insecure.NewCredentials() }

func newIOClient(conn *grpc.ClientConn) sandboxiov1.IOServiceClient {
	return sandboxiov1.NewIOServiceClient(conn)
}

func ownerOf(t *testing.T, st fs.FileInfo) uint32 {
	t.Helper()
	sys, ok := st.Sys().(*syscall.Stat_t)
	if !ok {
		t.Fatal("no stat_t")
	}
	return sys.Uid
}
