package grpcapi

import (
	"context"

	"github.com/sandboxd/sandboxd/orchestrator/core"
	"github.com/sandboxd/sandboxd/orchestrator/door/tokens"

	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/auth"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// authenticate is the auth interceptor's function: it puts the caller into
// the context for the domain. Without tokens every call is the implicit
// tenant's admin (core.DefaultCaller), set explicitly all the same.
func authenticate(toks *tokens.Set) auth.AuthFunc {
	return func(ctx context.Context) (context.Context, error) {
		if toks == nil {
			return core.WithCaller(ctx, core.DefaultCaller), nil
		}
		token, err := auth.AuthFromMD(ctx, "bearer")
		if err != nil {
			return nil, status.Error(codes.Unauthenticated, `this server requires a token: send "authorization: Bearer <token>" metadata (sandboxctl --token or SANDBOXCTL_TOKEN)`)
		}
		c, ok := toks.Lookup(token)
		if !ok {
			return nil, status.Error(codes.Unauthenticated, "the token is not valid on this server")
		}
		return core.WithCaller(ctx, c), nil
	}
}
