package httpapi

import "time"

// Internals the external tests (package httpapi_test) check.
const MaxBodyBytes = maxBodyBytes

var (
	Classify       = classify
	WriteNodeError = writeNodeError
)

// ReloadTokens re-reads h's tokens file now (it is re-read on a request at
// most once a second).
func ReloadTokens(h *Handler) error {
	if h.auth.file == nil {
		return nil
	}
	return h.auth.file.reload(time.Now(), true)
}
