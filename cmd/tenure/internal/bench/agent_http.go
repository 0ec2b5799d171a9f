package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
)

// maxAPIBody bounds what a benchmark reads from an agent's API.
const maxAPIBody = 64 << 20

// agentGet GETs path from agent a's HTTP API with cl. A non-200 answer is
// an error that names the path, the agent, the status and the first 512
// bytes of the body. out receives the answer: nil discards it, an
// io.Writer gets the raw bytes, anything else is JSON-decoded into. At most
// maxAPIBody bytes are read.
func agentGet(ctx context.Context, cl *http.Client, a *foAgent, path string, out any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+a.httpAddr+path, nil)
	if err != nil {
		return err
	}
	resp, err := cl.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body := io.LimitReader(resp.Body, maxAPIBody)
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(body, 512))
		return fmt.Errorf("GET %s from %s: %s: %s", path, a.id, resp.Status, strings.TrimSpace(string(b)))
	}
	if out == nil {
		_, _ = io.Copy(io.Discard, body)
		return nil
	}
	if w, ok := out.(io.Writer); ok {
		_, err := io.Copy(w, body)
		return err
	}
	return json.NewDecoder(body).Decode(out)
}

// agentPost POSTs body (nil: none) to path on agent a's HTTP API with cl,
// as application/json: the API refuses a state change without that header.
// Any 2xx answer is success; otherwise the error names the path, the
// agent, the status and the first 512 bytes of the body.
func agentPost(ctx context.Context, cl *http.Client, a *foAgent, path string, body []byte) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+a.httpAddr+path, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := cl.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode >= 300 {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return fmt.Errorf("POST %s to %s: %s: %s", path, a.id, resp.Status, bytes.TrimSpace(b))
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxAPIBody))
	return nil
}
