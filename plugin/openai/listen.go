package openai

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// limitListener caps the connections open at once. One over the cap is not left waiting in
// the accept queue: it is answered 503 in OpenAI's error format and closed, so a client learns
// at once that it should retry. The answering is itself bounded (maxRejecting at a time, each
// within rejectTimeout); beyond that the connection is just closed.
type limitListener struct {
	net.Listener
	max       int64
	open      atomic.Int64
	rejecting atomic.Int64
	wg        sync.WaitGroup // rejections in progress
}

const (
	maxRejecting  = 64
	rejectTimeout = time.Second
)

func newLimitListener(l net.Listener, max int) *limitListener {
	return &limitListener{Listener: l, max: int64(max)}
}

// Accept returns the next connection under the cap.
func (l *limitListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if l.open.Add(1) <= l.max {
			return &limitConn{Conn: c, l: l}, nil
		}
		l.open.Add(-1)
		if l.rejecting.Add(1) > maxRejecting {
			l.rejecting.Add(-1)
			_ = c.Close()
			continue
		}
		l.wg.Add(1)
		go l.reject(c)
	}
}

// Open returns the connections open now (rejected ones excluded).
func (l *limitListener) Open() int64 { return l.open.Load() }

// reject reads the request head (so that closing does not reset the connection under the
// client before it reads the answer), answers 503 and closes.
func (l *limitListener) reject(c net.Conn) {
	defer l.wg.Done()
	defer l.rejecting.Add(-1)
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(rejectTimeout))
	br := bufio.NewReaderSize(c, 4096)
	for n := 0; n < 64; n++ { // the request line and headers, up to an empty line
		line, err := br.ReadSlice('\n')
		if err != nil || len(line) <= 2 {
			break
		}
	}
	body := fmt.Sprintf(`{"error":{"message":"the server has %d connections open (--max-connections): retry later","type":"server_error","param":null,"code":503}}`+"\n", l.max)
	_, _ = fmt.Fprintf(c, "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nRetry-After: 1\r\nConnection: close\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
	if tc, ok := c.(*net.TCPConn); ok {
		// Wait (within the deadline) for the client to close after reading the answer: closing
		// with its unread bytes pending would reset the connection.
		_ = tc.CloseWrite()
		_, _ = io.CopyN(io.Discard, br, 1<<20)
	}
}

// limitConn gives its slot back once, when closed.
type limitConn struct {
	net.Conn
	l    *limitListener
	once sync.Once
}

func (c *limitConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() { c.l.open.Add(-1) })
	return err
}
