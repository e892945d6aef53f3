package sandboxv1

// MaxMessageSize is the largest message sandboxd sends. Rich
// outputs travel inline in an ExecuteEvent, and a large plot is several MiB
// of base64, well above gRPC's 4 MiB default: a client must raise its
// receive limit to this (grpc.MaxCallRecvMsgSize) or it fails on the first
// large figure. It is part of the contract, so it lives beside it.
const MaxMessageSize = 64 << 20
