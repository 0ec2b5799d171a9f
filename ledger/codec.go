package ledger

// codec walks a command's fields once for both directions: with w set it
// writes each field, with r set it reads each field into place. A kind
// declares its wire layout as one fields function (kindSpec.fields) over a
// codec, so encode and decode cannot drift apart. The codec is passed and
// the command returned by value, so walking a command allocates nothing.
type codec struct {
	w *writer
	r *reader
}

// has reports whether the entry being written or read is of encoding
// version v or newer: fields added in v are walked only then.
func (c codec) has(v byte) bool {
	if c.w != nil {
		return c.w.ver >= v
	}
	return c.r.ver >= v
}

func (c codec) u(p *uint64) {
	if c.w != nil {
		c.w.u(*p)
	} else {
		*p = c.r.u()
	}
}

func (c codec) u32(p *uint32) {
	if c.w != nil {
		c.w.u(uint64(*p))
	} else {
		*p = c.r.u32()
	}
}

func (c codec) i(p *int64) {
	if c.w != nil {
		c.w.i(*p)
	} else {
		*p = c.r.i()
	}
}

func (c codec) bool(p *bool) {
	if c.w != nil {
		c.w.bool(*p)
	} else {
		*p = c.r.bool()
	}
}

func (c codec) bytes(p *[]byte) {
	if c.w != nil {
		c.w.bytes(*p)
	} else {
		*p = c.r.bytes()
	}
}

// str walks a string field; writing one longer than MaxStringLen fails
// the encode with ErrTooLarge naming the field. Records (results,
// snapshots), whose strings come from checked commands, pass field "" and
// are written unchecked.
func (c codec) str(field string, p *string) {
	if c.w == nil {
		*p = c.r.str()
		return
	}
	if field != "" && c.w.err == nil {
		c.w.err = checkStr(field, *p)
	}
	c.w.str(*p)
}

// enum8 walks a one-byte enum (ShardState, JobState) as a uvarint no
// larger than 255.
func enum8[T ~uint8](c codec, p *T) {
	if c.w != nil {
		c.w.u(uint64(*p))
	} else {
		*p = T(c.r.u8())
	}
}
