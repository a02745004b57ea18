package main

import (
	"errors"
	"fmt"
	"net"
	"strings"
)

// checkFree tries to listen on every address, one after the other, and
// returns an error naming the first one that is taken. A plain listen
// (without SO_REUSEPORT) fails on a port a Caddy process holds, although
// a second Caddy would bind it too and the kernel would split the traffic
// between the two.
func checkFree(addrs []string) error {
	for _, a := range addrs {
		l, err := net.Listen("tcp", a)
		if err != nil {
			return &portTakenError{addr: a, err: err}
		}
		if err := l.Close(); err != nil {
			return err
		}
	}
	return nil
}

type portTakenError struct {
	addr string
	err  error
}

func (e *portTakenError) Error() string {
	return fmt.Sprintf("%s is already in use (%v)", e.addr, e.err)
}

func (e *portTakenError) Unwrap() error { return e.err }

// checkPortsMessage is what `make run` prints when a port it needs is taken.
func checkPortsMessage(who string, err error) string {
	var pt *portTakenError
	if !errors.As(err, &pt) {
		return fmt.Sprintf("%s: checking the ports: %v", who, err)
	}
	return fmt.Sprintf("%s: cannot start: %s.\n"+
		"Is an earlier `make run` (or another gateway or CRM) still running? Stop it first (Ctrl-C in its terminal).\n"+
		"Two gateways on one port would both start and split the traffic between them: each would let one delivery of a retried webhook through.\n"+
		"To try the demo against the running gateway, run `make demo`: it uses a running `make run` gateway as it is.",
		who, pt.Error())
}

// splitList splits a comma-separated flag value, dropping empty items.
func splitList(s string) []string {
	var out []string
	for _, x := range strings.Split(s, ",") {
		if x = strings.TrimSpace(x); x != "" {
			out = append(out, x)
		}
	}
	return out
}
