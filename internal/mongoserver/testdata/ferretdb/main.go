// Command ferretdb runs an embedded FerretDB with its sqlite handler for the
// lease package's MongoDB tests. It is a separate module so that FerretDB
// stays out of the library's go.mod.
//
// Usage: ferretdb -dir DIR [-listen 127.0.0.1:0] [-cleanup]
//
// It prints "listening on HOST:PORT" on stdout once it accepts connections,
// and runs until stdin reaches EOF or it gets SIGINT/SIGTERM, so that it
// never outlives the test process that started it.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/url"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/FerretDB/FerretDB/ferretdb"
)

func main() {
	dir := flag.String("dir", "", "directory for the sqlite files (required)")
	listen := flag.String("listen", "127.0.0.1:0", "TCP address to listen on")
	cleanup := flag.Bool("cleanup", false, "remove -dir on exit")
	flag.Parse()
	err := run(*dir, *listen)
	if *cleanup && *dir != "" {
		os.RemoveAll(*dir)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "ferretdb:", err)
		os.Exit(1)
	}
}

func run(dir, listen string) error {
	if dir == "" {
		return fmt.Errorf("-dir is required")
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(abs, 0o700); err != nil {
		return err
	}
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	f, err := ferretdb.New(&ferretdb.Config{
		Listener:  ferretdb.ListenerConfig{TCP: listen},
		Logger:    logger,
		Handler:   "sqlite",
		SQLiteURL: (&url.URL{Scheme: "file", Path: abs + "/"}).String(),
	})
	if err != nil {
		return err
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ctx, cancel := context.WithCancel(ctx)
	go func() { // the parent closes stdin (or dies): stop
		_, _ = io.Copy(io.Discard, os.Stdin)
		cancel()
	}()

	done := make(chan error, 1)
	go func() { done <- f.Run(ctx) }()

	// MongoDBURI blocks until the listener is up.
	u, err := url.Parse(f.MongoDBURI())
	if err != nil {
		return err
	}
	if err := waitDial(ctx, u.Host); err != nil {
		return err
	}
	fmt.Printf("listening on %s\n", u.Host)
	return <-done
}

// waitDial returns once addr accepts a TCP connection.
func waitDial(ctx context.Context, addr string) error {
	for {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			return c.Close()
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}
