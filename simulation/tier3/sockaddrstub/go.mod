// The wasip1 stand-in for github.com/hashicorp/go-sockaddr, used only by
// the tier-3 module (see ../go.mod). The real package has no route-table
// code for wasip1 and does not build there.
module github.com/hashicorp/go-sockaddr

go 1.25.0
