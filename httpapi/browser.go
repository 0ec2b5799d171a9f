package httpapi

import (
	"fmt"
	"mime"
	"net"
	"net/http"
	"net/url"
	"strings"
)

// Browser safety (docs/security.md). A web page the operator visits can
// make the browser send requests to the agent (it knows nothing but the
// address); these checks make sure such a request neither changes state
// nor reads anything:
//
//   - every request's Host must be one the agent answers to (an IP
//     literal, localhost or *.localhost, a name in Options.AllowedHosts):
//     DNS rebinding points an attacker's name at the agent, and the
//     browser then sends that name as Host;
//   - a state-changing request (any method but GET, HEAD and OPTIONS)
//     needs Content-Type: application/json, which a page can send only
//     after a CORS preflight the API never grants (a "simple" form or
//     no-cors fetch carries text/plain, a form encoding or nothing);
//   - and it must not come from another origin: an Origin header (sent
//     by browsers on cross-origin and on POST requests) must name the very
//     host the request was sent to, and Sec-Fetch-Site, when present,
//     must be same-origin or none.
//
// Non-browser clients (tenure, curl, services) send no Origin and set the
// content type; the tenure client always does.

// hostGuard is the Host allow-list.
type hostGuard struct {
	any   bool
	names map[string]bool
}

func newHostGuard(allowed []string) hostGuard {
	g := hostGuard{names: map[string]bool{}}
	for _, h := range allowed {
		h = normHost(h)
		if h == "*" {
			g.any = true
		}
		if h != "" {
			g.names[h] = true
		}
	}
	return g
}

// normHost is a Host header's (or an address's) host part, lower case,
// without port, brackets or a trailing dot.
func normHost(h string) string {
	h = strings.TrimSpace(h)
	if host, _, err := net.SplitHostPort(h); err == nil {
		h = host
	}
	h = strings.TrimPrefix(strings.TrimSuffix(h, "]"), "[")
	return strings.TrimSuffix(strings.ToLower(h), ".")
}

func (g hostGuard) allows(hostHeader string) bool {
	h := normHost(hostHeader)
	switch {
	case g.any, h == "":
		return true
	case net.ParseIP(h) != nil:
		return true // an IP literal is never an attacker's DNS name
	case h == "localhost" || strings.HasSuffix(h, ".localhost"):
		return true
	}
	return g.names[h]
}

// stateChanging reports whether method may change state.
func stateChanging(method string) bool {
	switch method {
	case http.MethodGet, http.MethodHead, http.MethodOptions:
		return false
	}
	return true
}

// sameOrigin reports whether the Origin header names the host the request
// was sent to.
func sameOrigin(origin, host string) bool {
	u, err := url.Parse(origin)
	if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
		return false // "null", garbage
	}
	return strings.EqualFold(u.Host, host)
}

// browserGuard wraps next with the checks above. Refusals answer JSON
// with a code and count in refused (by reason) when it is set.
func browserGuard(g hostGuard, refused func(reason string), next http.Handler) http.Handler {
	refuse := func(w http.ResponseWriter, code int, reason, msg string) {
		if refused != nil {
			refused(reason)
		}
		writeErrorCode(w, code, reason, msg)
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !g.allows(r.Host) {
			refuse(w, http.StatusMisdirectedRequest, "unknown_host",
				"this agent does not answer to Host "+strings.ToLower(normHost(r.Host))+
					": use its IP address or localhost, or add the name with --http-allowed-hosts (DNS rebinding protection)")
			return
		}
		if stateChanging(r.Method) {
			if site := r.Header.Get("Sec-Fetch-Site"); site != "" && site != "same-origin" && site != "none" {
				refuse(w, http.StatusForbidden, "foreign_origin", "a "+site+" browser request may not change state")
				return
			}
			if o := r.Header.Get("Origin"); o != "" && !sameOrigin(o, r.Host) {
				refuse(w, http.StatusForbidden, "foreign_origin", "Origin "+o+" is not this agent: cross-origin requests may not change state")
				return
			}
			if mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type")); err != nil || mt != "application/json" {
				got := r.Header.Get("Content-Type")
				if got == "" {
					got = "none"
				}
				if len(got) > 100 {
					got = got[:100] + "…"
				}
				refuse(w, http.StatusUnsupportedMediaType, "unsupported_media_type",
					fmt.Sprintf("%s %s needs Content-Type: application/json, not %q (a browser cannot send it cross-origin without a preflight)", r.Method, r.URL.Path, got))
				return
			}
		}
		next.ServeHTTP(w, r)
	})
}
