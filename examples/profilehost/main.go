// Command profilehost is the shape of a profile host: one store per node,
// its profiles brought up together by HoldEach, a fenced transaction (or
// Confirm, where the store is no SQL database) before a destructive step,
// Holders for an admin page, Handoff to move a profile to a chosen node,
// metrics for the people who get paged, and ReleaseAll at shutdown so
// that other nodes take over at once.
//
// It serves its leases' metrics on /metrics in Prometheus' text format,
// through OpenTelemetry's Prometheus exporter: the lease library itself
// depends on the OpenTelemetry API only (leaseotel), and this program,
// its own module, picks the SDK and the exporter. It runs until
// interrupted.
//
//	go run . -listen 127.0.0.1:9464 -store file:/var/lib/profilehost/leases
//
// -store takes any URL lease.Open takes: this program imports the sqlite,
// postgres and mongodb drivers, so "sqlite:/var/lib/profilehost/leases.db",
// "postgres://…" and "mongodb://…" work as well as "file:…".
package main

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"flag"
	"fmt"
	"log"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/leasekit/lease"
	"github.com/leasekit/lease/leaseotel"
	// The stores -store can name besides file: and memory:: importing a
	// driver registers its URL schemes with lease.Open.
	_ "github.com/leasekit/lease/mongodb"
	"github.com/leasekit/lease/postgres"
	"github.com/leasekit/lease/sqlite"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.opentelemetry.io/otel/exporters/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
)

func main() {
	listen := flag.String("listen", "127.0.0.1:9464", "address to serve /metrics on")
	storeURL := flag.String("store", "", "store URL (default: a file: store in a temporary directory)")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, *listen, *storeURL); err != nil {
		log.Fatal(err)
	}
}

func run(ctx context.Context, listen, storeURL string) error {
	if storeURL == "" {
		dir, err := os.MkdirTemp("", "profilehost")
		if err != nil {
			return err
		}
		defer os.RemoveAll(dir)
		storeURL = "file:" + dir
	}

	// Metrics: the OpenTelemetry SDK with the Prometheus exporter as its
	// reader, and the lease observer on top of it.
	exporter, err := prometheus.New()
	if err != nil {
		return err
	}
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(exporter))
	defer mp.Shutdown(context.Background())
	obs, err := leaseotel.New(mp)
	if err != nil {
		return err
	}

	// One store per node. On SQLite, PostgreSQL and MongoDB its profiles
	// are kept through one session (R18–R24): one write per renewal
	// period keeps them all, whatever their number; if that write keeps
	// failing until the deadline, every profile's Held ends together, and
	// HoldEach takes them back under a new session. On file: each lease
	// is a flock and needs no renewal.
	node, err := lease.Open(ctx, storeURL, lease.WithOwner("node-a"), lease.WithObserver(obs))
	if err != nil {
		return err
	}
	defer node.Close()

	// The node's profiles, brought up together: one HoldEach takes the
	// free keys in batches and yields each Held as soon as its key is
	// held, with no goroutine per key.
	profiles := map[string]*lease.Held{}
	for r := range lease.HoldEach(ctx, node, []string{"profile:41", "profile:42", "profile:43"}) {
		if r.Err != nil {
			return r.Err
		}
		if r.Held.Grant().PreviousUnclean {
			fmt.Println("recovering", r.Key) // the previous host died holding it
		}
		profiles[r.Key] = r.Held // serve the profile under r.Held.Context()
	}

	// Before a destructive step, archive the profile in a transaction
	// fenced by its lease: it commits only while the lease is held, where
	// a Confirm followed by the write would race a takeover.
	if err := archive(ctx, storeURL, profiles["profile:42"]); err != nil {
		log.Print(err)
	}

	// An admin page: who holds what.
	for rec, err := range node.Holders(ctx, "profile:") {
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println(rec.Key, rec.Owner, rec.Epoch)
	}

	// Rebalancing: a node that joins the cluster takes profile:43 from
	// this one. Handoff ends the Held, then releases the key reserved for
	// node-b: nobody else can take it in between, and node-b gets it with
	// an ordinary Hold, epoch + 1 and PreviousUnclean false (R25). Here
	// node-b is a second store of this process, standing in for a host.
	nodeB, err := lease.Open(ctx, storeURL, lease.WithOwner("node-b"))
	if err != nil {
		return err
	}
	defer nodeB.Close()
	if err := profiles["profile:43"].Handoff(ctx, "node-b"); err != nil {
		return err
	}
	delete(profiles, "profile:43")
	moved, err := lease.Hold(ctx, nodeB, "profile:43")
	if err != nil {
		return err
	}
	defer moved.Release(context.Background())
	fmt.Println("moved profile:43 to node-b at epoch", moved.Grant().Epoch)

	// Serve the metrics until interrupted.
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return err
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.Handler())
	srv := &http.Server{Handler: mux}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	fmt.Printf("metrics at http://%s/metrics\n", ln.Addr())
	select {
	case <-ctx.Done():
	case err := <-served:
		return err
	}
	if err := srv.Shutdown(context.Background()); err != nil && !errors.Is(err, http.ErrServerClosed) {
		log.Print(err)
	}
	ctx = context.Background()

	// Shutdown: hand every lease back; each Held's context ends first. On
	// a database store this is one write, the session's clean end, and
	// every profile is free at once for the other nodes (R22).
	if err := node.ReleaseAll(ctx); err != nil {
		log.Print(err)
	}
	fmt.Println("released:", profiles["profile:41"].Context().Err() != nil)
	return nil
}

// archive records h's profile as archived, in the lease's own database
// when the store is one (sqlite: or postgres://), in a transaction fenced
// by h's grant. Another store keeps its records elsewhere: there it
// confirms the lease, and an archive would refuse writes of an older
// epoch than the newest it has seen (fencing by epoch).
func archive(ctx context.Context, storeURL string, h *lease.Held) error {
	db, fence, insert, err := openLeaseDB(storeURL)
	if err != nil {
		return err
	}
	if db == nil {
		g, err := h.Confirm(ctx)
		if err == nil {
			fmt.Println("archiving", g.Key, "at epoch", g.Epoch)
		}
		return err
	}
	defer db.Close()
	if _, err := db.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS profile_archive (key TEXT NOT NULL, epoch BIGINT NOT NULL)`); err != nil {
		return err
	}
	g := h.Grant()
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	if err := fence(ctx, tx, g); err != nil {
		return err // lease.ErrLost: another node has the profile; nothing is archived
	}
	if _, err := tx.ExecContext(ctx, insert, g.Key, int64(g.Epoch)); err != nil {
		return err
	}
	if err := tx.Commit(); err != nil {
		return err
	}
	fmt.Println("archived", g.Key, "at epoch", g.Epoch)
	return nil
}

// openLeaseDB opens a pool of the program's own on the database that
// storeURL keeps its leases in, with the Fence of its driver and the
// archive's INSERT in its placeholders; db is nil for a store that is no
// SQL database.
func openLeaseDB(storeURL string) (db *sql.DB, fence func(context.Context, *sql.Tx, lease.Grant) error, insert string, err error) {
	switch {
	case strings.HasPrefix(storeURL, "sqlite:"):
		dsn := url.URL{Scheme: "file", Path: strings.TrimPrefix(storeURL, "sqlite:"),
			RawQuery: "_pragma=busy_timeout(5000)&_txlock=immediate"}
		db, err = sql.Open("sqlite", dsn.String())
		return db, sqlite.Fence, `INSERT INTO profile_archive VALUES (?, ?)`, err
	case strings.HasPrefix(storeURL, "postgres://"), strings.HasPrefix(storeURL, "postgresql://"):
		u, err := url.Parse(storeURL)
		if err != nil {
			return nil, nil, "", err
		}
		q := u.Query()
		table := cmp.Or(q.Get("table"), postgres.DefaultTable)
		q.Del("table") // the driver's own parameters, which the server would refuse
		q.Del("max_conns")
		u.RawQuery = q.Encode()
		db, err = sql.Open("pgx", u.String()) // pgx's database/sql driver, which the postgres driver registers
		fence = func(ctx context.Context, tx *sql.Tx, g lease.Grant) error {
			return postgres.Fence(ctx, tx, g, postgres.Table(table))
		}
		return db, fence, `INSERT INTO profile_archive VALUES ($1, $2)`, err
	}
	return nil, nil, "", nil
}
