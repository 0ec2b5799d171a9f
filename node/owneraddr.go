package node

import "fmt"

// OwnerAddr returns where to send a request about key: the advertised
// HTTP/application address (Config.HTTPAddr, gossiped in the member's
// metadata) of the committed owner of key's shard, and the token that
// owner holds (the shard and its committed epoch) by this node's replica.
//
// It is a routing hint, not a guarantee: ownership can move after the
// call (and this replica may lag the control group by a commit), so the
// receiver must check the token against its own acting token before it
// serves (package route does). The owner may be this node.
//
// Errors: ErrNoOwner when the shard has no valid committed owner (a
// failover is due or in progress), ErrNoAddress when the owner gossips no
// HTTPAddr or is not (yet) a gossip member here, ErrClosed after Close.
func (n *Node) OwnerAddr(key string) (addr string, tok Token, err error) {
	if n.isClosed() {
		return "", Token{}, ErrClosed
	}
	shard := n.ShardFor(key)
	rec, ok := n.be.shard(shard)
	if !ok || rec.State == ShardUnowned || !rec.Valid || rec.Owner == "" {
		return "", Token{}, fmt.Errorf("shard %d: %w", shard, ErrNoOwner)
	}
	tok = Token{Shard: shard, Epoch: rec.Epoch}
	if rec.Owner == n.cfg.NodeID && n.cfg.HTTPAddr != "" {
		return n.cfg.HTTPAddr, tok, nil
	}
	for _, m := range n.be.members() {
		if m.ID != rec.Owner {
			continue
		}
		if m.HTTPAddr == "" || m.State == MemberDead || m.State == MemberLeft {
			break
		}
		return m.HTTPAddr, tok, nil
	}
	return "", tok, fmt.Errorf("shard %d: owner %s: %w", shard, rec.Owner, ErrNoAddress)
}
