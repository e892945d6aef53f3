package core

import (
	"context"
	"errors"
	"fmt"
)

// classError is an error of one of the classes in errors.go. Its message is
// written for the caller and does not repeat the class name (the gRPC code
// already carries it); the cause, when there is one, stays reachable with
// errors.Is/As for logs and tests.
type classError struct {
	class *Class
	msg   string
	cause error
}

func (e *classError) Error() string { return e.msg }

// Unwrap exposes both the class and the cause to errors.Is and errors.As.
func (e *classError) Unwrap() []error {
	if e.cause == nil {
		return []error{e.class}
	}
	return []error{e.class, e.cause}
}

// errorf returns an error of class with a formatted message. A %w verb in
// format records the cause (the message then includes it, as fmt.Errorf does).
func Errorf(class *Class, format string, args ...any) error {
	err := fmt.Errorf(format, args...)
	return &classError{class: class, msg: err.Error(), cause: errors.Unwrap(err)}
}

// invalidf, notFoundf, preconditionf, exhaustedf, unavailablef and
// alreadyExistsf are
// shorthands for errorf with each class.
func Invalidf(format string, args ...any) error {
	return Errorf(ErrInvalidArgument, format, args...)
}

func NotFoundf(format string, args ...any) error { return Errorf(ErrNotFound, format, args...) }

func Preconditionf(format string, args ...any) error {
	return Errorf(ErrFailedPrecondition, format, args...)
}

func Exhaustedf(format string, args ...any) error {
	return Errorf(ErrResourceExhausted, format, args...)
}

func Unavailablef(format string, args ...any) error {
	return Errorf(ErrUnavailable, format, args...)
}

func AlreadyExistsf(format string, args ...any) error {
	return Errorf(ErrAlreadyExists, format, args...)
}

// isClassified reports whether err already carries a class (or is a context
// error, which callers recognise by itself), so wrappers don't classify twice.
func IsClassified(err error) bool {
	return ClassOf(err) != nil || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)
}
