package chat

import "fmt"

// RequestError is a client mistake in a request body. Each HTTP API reports
// it in its own error shape with status 400.
type RequestError struct {
	Param   string // the offending field, e.g. "messages[2].role"; may be ""
	Message string
}

func (e *RequestError) Error() string {
	if e.Param == "" {
		return e.Message
	}
	return fmt.Sprintf("%s: %s", e.Param, e.Message)
}

func badRequest(param, format string, args ...any) *RequestError {
	return &RequestError{Param: param, Message: fmt.Sprintf(format, args...)}
}
