package httpapi

import (
	"embed"
	"io/fs"
	"net/http"
)

// dashboardFiles are the dashboard's static assets: plain HTML, CSS and
// JavaScript that poll the /v1 API; there is no build step.
//
//go:embed dashboard
var dashboardFiles embed.FS

// dashboardHandler serves the dashboard at /.
func dashboardHandler() http.Handler {
	sub, err := fs.Sub(dashboardFiles, "dashboard")
	if err != nil {
		panic("tenure: embedded dashboard missing: " + err.Error()) // a build error, not input
	}
	files := http.FileServerFS(sub)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "no-cache")
		files.ServeHTTP(w, r)
	})
}
