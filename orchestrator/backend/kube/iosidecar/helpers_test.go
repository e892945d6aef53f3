package iosidecar

import (
	"io/fs"
	"syscall"
	"testing"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

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

// withReason is a status of code carrying an ErrorInfo of the sidecar's
// domain with reason, as the Server sends its errors (or a hostile
// sidecar forges them).
func withReason(code codes.Code, reason, msg string) error {
	st, err := status.New(code, msg).WithDetails(&errdetails.ErrorInfo{Reason: reason, Domain: ErrorDomain})
	if err != nil {
		panic(err)
	}
	return st.Err()
}
