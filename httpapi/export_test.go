package httpapi

// Internals the external tests (package httpapi_test) check.
const MaxBodyBytes = maxBodyBytes

var (
	Classify       = classify
	WriteNodeError = writeNodeError
)
