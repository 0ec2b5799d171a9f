// Package browsertest holds the dashboard's browser tests: headless
// chromium, driven through chromedp, against the API over a fake node and
// against a `tenure demo` cluster. They skip where no chromium is
// installed (set TENURE_CHROMIUM to its path). A module of its own so the
// library does not depend on chromedp; `make test` runs it.
package browsertest
