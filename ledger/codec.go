package ledger

import (
	"cmp"
	"fmt"
	"strings"
)

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
	if field != "" && len(*p) > MaxStringLen && c.w.err == nil {
		// A copy of the name: passing field itself to the error would make
		// walk's arguments, the command's fields, escape (allocate).
		c.w.err = checkStr(strings.Clone(field), *p)
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

// limited is a command's string field with its name: walking it to write
// fails the encode with ErrTooLarge when it is over MaxStringLen.
type limited struct {
	name string
	p    *string
}

// walk walks fields in order, each a pointer to a field of a supported
// type (*uint64, *uint32, *int64, *bool, *[]byte, *string unchecked,
// limited, *ShardState, *JobState), so a kind lists its layout in one
// call. An unsupported type fails the encode or decode with ErrInvalid
// (a programming error the golden test catches), never a panic.
func (c codec) walk(fields ...any) {
	for k, f := range fields {
		switch p := f.(type) {
		case *uint64:
			c.u(p)
		case *uint32:
			c.u32(p)
		case *int64:
			c.i(p)
		case *bool:
			c.bool(p)
		case *[]byte:
			c.bytes(p)
		case *string:
			c.str("", p)
		case limited:
			c.str(p.name, p.p)
		case *ShardState:
			enum8(c, p)
		case *JobState:
			enum8(c, p)
		default:
			// Not %T of f: that would make every field escape (allocate).
			err := fmt.Errorf("%w: codec cannot walk field %d: unsupported type", ErrInvalid, k)
			if c.w != nil {
				c.w.err = cmp.Or(c.w.err, err)
			} else {
				c.r.fail(err)
			}
		}
	}
}
