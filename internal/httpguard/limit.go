package httpguard

import (
	"errors"
	"fmt"
	"net/http"
)

// LimitBody caps r's body at limit bytes; call it before anything reads
// the body. A body declared longer (its Content-Length) is refused before
// it is read: LimitBody returns an *http.MaxBytesError and leaves the body
// alone, so that net/http sends no 100 Continue and a client that waits
// for one sends nothing; the caller answers at once (TooLarge, or 413 in
// its own form, naming the limit). Any other body reads past limit fail
// with an *http.MaxBytesError (http.MaxBytesReader), answered alike.
// Either way End, if r went through a Guard, sends the refusal and
// discards a bounded rest of the body, so that the client reads the
// refusal rather than a reset.
func LimitBody(w http.ResponseWriter, r *http.Request, limit int64) error {
	if r.ContentLength > limit {
		return &http.MaxBytesError{Limit: limit}
	}
	if r.Body != nil && r.Body != http.NoBody {
		r.Body = http.MaxBytesReader(w, r.Body, limit)
	}
	return nil
}

// TooLargeMessage is the refusal of a body past limit bytes.
func TooLargeMessage(limit int64) string {
	return fmt.Sprintf("the request body is larger than %d bytes, the limit of this endpoint", limit)
}

// TooLarge answers 413 Content Too Large, naming the limit, if err is an
// *http.MaxBytesError (from LimitBody, or a read of the body it capped),
// and reports whether it did.
func TooLarge(w http.ResponseWriter, err error) bool {
	var mbe *http.MaxBytesError
	if !errors.As(err, &mbe) {
		return false
	}
	http.Error(w, TooLargeMessage(mbe.Limit), http.StatusRequestEntityTooLarge)
	return true
}
