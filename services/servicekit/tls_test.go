package servicekit

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	callsv1 "switchyard.dev/gen/switchyard/calls/v1"
	schedulerv1 "switchyard.dev/gen/switchyard/scheduler/v1"
	workerv1 "switchyard.dev/gen/switchyard/worker/v1"
)

// fakeScheduler answers the two calls the tests make.
type fakeScheduler struct {
	schedulerv1.UnimplementedSchedulerServiceServer
}

func (fakeScheduler) RegisterWorker(context.Context, *schedulerv1.RegisterWorkerRequest) (*schedulerv1.RegisterWorkerResponse, error) {
	return &schedulerv1.RegisterWorkerResponse{}, nil
}

func (fakeScheduler) ListWorkers(context.Context, *schedulerv1.ListWorkersRequest) (*schedulerv1.ListWorkersResponse, error) {
	return &schedulerv1.ListWorkersResponse{}, nil
}

func (fakeScheduler) GetAdmissionUse(context.Context, *schedulerv1.GetAdmissionUseRequest) (*schedulerv1.GetAdmissionUseResponse, error) {
	return &schedulerv1.GetAdmissionUseResponse{}, nil
}

// secureScheduler serves fakeScheduler (gRPC and REST) with mutual TLS from
// ca and returns the server.
// secureSchedulerOptions are a scheduler's options on loopback with ca's
// certificate of the scheduler.
func secureSchedulerOptions(t *testing.T, ca *DevCA) Options {
	t.Helper()
	src, err := ca.Source(Identity{Service: "scheduler"})
	if err != nil {
		t.Fatal(err)
	}
	opts := DefaultOptions("scheduler")
	opts.GRPCAddr, opts.HTTPAddr = "127.0.0.1:0", "127.0.0.1:0"
	opts.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	opts.ShutdownNotice = 0 // tests stop at once
	opts.TLS = TLSOptions{Source: src}
	return opts
}

func secureScheduler(t *testing.T, ca *DevCA, adjust ...func(*Options)) *Server {
	t.Helper()
	opts := secureSchedulerOptions(t, ca)
	for _, f := range adjust {
		f(&opts)
	}
	srv, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	schedulerv1.RegisterSchedulerServiceServer(srv, fakeScheduler{})
	srv.Gateway(schedulerv1.RegisterSchedulerServiceHandler)
	serveUntilCleanup(t, srv)
	return srv
}

func serveUntilCleanup(t *testing.T, srv *Server) {
	t.Helper()
	if err := srv.Listen(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
}

// clientAs dials addr as id, a certificate of ca.
func clientAs(t *testing.T, ca *DevCA, id Identity, addr string) *grpc.ClientConn {
	t.Helper()
	src, err := ca.Source(id)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := Dial(addr, grpc.WithTransportCredentials(credentials.NewTLS(tlsConfigs{src: src, trustDomain: ca.TrustDomain}.client())))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

func register(conn grpc.ClientConnInterface, worker string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err := schedulerv1.NewSchedulerServiceClient(conn).RegisterWorker(ctx,
		&schedulerv1.RegisterWorkerRequest{Worker: &workerv1.Worker{WorkerId: worker}})
	return err
}

func TestMutualTLSAuthorizesByIdentity(t *testing.T) {
	ca, err := NewDevCA("")
	if err != nil {
		t.Fatal(err)
	}
	srv := secureScheduler(t, ca)
	addr := srv.GRPCAddr()
	shim0 := Identity{Service: "engine-shim", Instance: "worker-0"}

	for _, tt := range []struct {
		name   string
		conn   *grpc.ClientConn
		worker string
		want   codes.Code
	}{
		{"a shim registers itself", clientAs(t, ca, shim0, addr), "worker-0", codes.OK},
		{"a shim registers another worker", clientAs(t, ca, shim0, addr), "worker-1", codes.PermissionDenied},
		{"another service registers a worker", clientAs(t, ca, Identity{Service: "frontend"}, addr), "worker-0", codes.PermissionDenied},
		{"an operator registers a worker", clientAs(t, ca, Identity{Service: AdminIdentity}, addr), "worker-0", codes.PermissionDenied},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := status.Code(register(tt.conn, tt.worker)); got != tt.want {
				t.Errorf("RegisterWorker: %v, want %v", got, tt.want)
			}
			// Over a call stream, which any mesh identity may open, each
			// call is still checked by its own method's rule.
			if got := status.Code(register(NewCallConn(tt.conn), tt.worker)); got != tt.want {
				t.Errorf("RegisterWorker over a call stream: %v, want %v", got, tt.want)
			}
		})
	}

	t.Run("plaintext is refused", func(t *testing.T) {
		conn, err := Dial(addr)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		if got := status.Code(register(conn, "worker-0")); got != codes.Unavailable {
			t.Errorf("plaintext RegisterWorker: %v, want Unavailable (no TLS handshake)", got)
		}
	})
	t.Run("another CA's certificate is refused", func(t *testing.T) {
		other, err := NewDevCA("")
		if err != nil {
			t.Fatal(err)
		}
		// The client trusts the server (our CA) but presents the other's.
		src, _ := other.Source(shim0)
		theirs, _, _ := src.Current()
		ours, _ := ca.Source(shim0)
		_, pool, _ := ours.Current()
		mixed := staticSource{cert: theirs, pool: pool}
		conn, err := Dial(addr, grpc.WithTransportCredentials(credentials.NewTLS(tlsConfigs{src: mixed, trustDomain: ca.TrustDomain}.client())))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		if got := status.Code(register(conn, "worker-0")); got != codes.Unavailable {
			t.Errorf("RegisterWorker with a foreign certificate: %v, want Unavailable (handshake refused)", got)
		}
	})
	t.Run("an operator lists workers", func(t *testing.T) {
		_, err := schedulerv1.NewSchedulerServiceClient(clientAs(t, ca, Identity{Service: AdminIdentity}, addr)).
			ListWorkers(context.Background(), &schedulerv1.ListWorkersRequest{})
		if err != nil {
			t.Errorf("ListWorkers as admin: %v", err)
		}
	})
}

// httpsClient is an HTTP client presenting id (nil: no certificate) that
// trusts ca.
func httpsClient(t *testing.T, ca *DevCA, id *Identity) *http.Client {
	t.Helper()
	cfg := &tls.Config{MinVersion: tls.VersionTLS13, RootCAs: x509.NewCertPool(), InsecureSkipVerify: true}
	if id != nil {
		certPEM, keyPEM, err := ca.Issue(*id)
		if err != nil {
			t.Fatal(err)
		}
		c, err := tls.X509KeyPair(certPEM, keyPEM)
		if err != nil {
			t.Fatal(err)
		}
		cfg.Certificates = []tls.Certificate{c}
	}
	tr := &http.Transport{TLSClientConfig: cfg}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: 5 * time.Second}
}

// identityCase is one caller an HTTP check is tried as, and the status it
// should get.
type identityCase struct {
	name string
	id   *Identity
	want int
}

// byIdentity is the operator, a service the path is not for (the
// frontend) and a client with no certificate, with their statuses.
func byIdentity(operator, service, none int) []identityCase {
	admin, frontend := Identity{Service: AdminIdentity}, Identity{Service: "frontend"}
	return []identityCase{{"operator", &admin, operator}, {"a service the path is not for", &frontend, service}, {"no certificate", nil, none}}
}

func TestRESTGatewayAuthorizesTheHTTPClient(t *testing.T) {
	ca, err := NewDevCA("")
	if err != nil {
		t.Fatal(err)
	}
	srv := secureScheduler(t, ca)
	url := "https://" + srv.HTTPAddr() + "/v1/admission/use" // the replicas' and the operator's
	for _, tt := range byIdentity(http.StatusOK, http.StatusForbidden, http.StatusUnauthorized) {
		t.Run(tt.name, func(t *testing.T) {
			req, _ := http.NewRequest(http.MethodGet, url, nil)
			// A client cannot claim an identity through the header the
			// gateway uses.
			req.Header.Set("Grpc-Metadata-"+restPeerKey, "admin")
			resp, err := httpsClient(t, ca, tt.id).Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != tt.want {
				t.Errorf("GET /v1/admission/use: %d, want %d", resp.StatusCode, tt.want)
			}
		})
	}
	// /metrics and /healthz need no certificate.
	for _, path := range []string{"/metrics", "/healthz"} {
		resp, err := httpsClient(t, ca, nil).Get("https://" + srv.HTTPAddr() + path)
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Errorf("GET %s without a certificate: %v %v", path, resp, err)
		}
		if resp != nil {
			resp.Body.Close()
		}
	}
}

func TestRefusesExposureWithoutTLS(t *testing.T) {
	for _, tt := range []struct {
		addr     string
		insecure bool
		ok       bool
	}{
		{"127.0.0.1:0", false, true},
		{"localhost:0", false, true},
		{":0", false, false},
		{"0.0.0.0:0", false, false},
		{":0", true, true},
	} {
		opts := DefaultOptions("scheduler")
		opts.GRPCAddr, opts.HTTPAddr = tt.addr, ""
		opts.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
		opts.ShutdownNotice = 0 // tests stop at once
		opts.TLS.Insecure = tt.insecure
		srv, err := New(opts)
		if err != nil {
			t.Fatal(err)
		}
		err = srv.Listen()
		srv.Close()
		if (err == nil) != tt.ok {
			t.Errorf("listen %s (insecure %v): %v, want ok=%v", tt.addr, tt.insecure, err, tt.ok)
		}
	}
}

// A public HTTP port beyond loopback without its own TLS is served (TLS may
// end in front of it) but said at start; on loopback, or with HTTPS, not.
func TestPublicPlaintextBeyondLoopbackIsSaid(t *testing.T) {
	for _, tt := range []struct {
		addr string
		warn bool
	}{{"127.0.0.1:0", false}, {":0", true}} {
		var logs strings.Builder
		opts := DefaultOptions("frontend")
		opts.GRPCAddr, opts.HTTPAddr, opts.PublicHTTP = "127.0.0.1:0", tt.addr, true
		opts.Logger = slog.New(slog.NewTextHandler(&logs, nil))
		opts.ShutdownNotice = 0
		srv, err := New(opts)
		if err != nil {
			t.Fatal(err)
		}
		err = srv.Listen()
		srv.Close()
		if err != nil {
			t.Fatalf("listen %s: %v", tt.addr, err)
		}
		if said := strings.Contains(logs.String(), "public HTTP API listens beyond loopback in plaintext"); said != tt.warn {
			t.Errorf("public HTTP on %s: warned %v, want %v:\n%s", tt.addr, said, tt.warn, logs.String())
		}
	}
}

// TestCertificateRotation: replaced files are used by the next connection,
// without a restart.
func TestCertificateRotation(t *testing.T) {
	defer func(d time.Duration) { reloadCheck = d }(reloadCheck)
	reloadCheck = 10 * time.Millisecond
	ca, err := NewDevCA("")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	files := FileSource{CertFile: filepath.Join(dir, "tls.crt"), KeyFile: filepath.Join(dir, "tls.key"), CAFile: filepath.Join(dir, "ca.crt")}
	write := func() *x509.Certificate {
		certPEM, keyPEM, err := ca.Issue(Identity{Service: "scheduler"})
		if err != nil {
			t.Fatal(err)
		}
		// As a secret mount rotates: new files renamed into place.
		for path, data := range map[string][]byte{files.CertFile: certPEM, files.KeyFile: keyPEM, files.CAFile: ca.CertPEM} {
			if err := os.WriteFile(path+".new", data, 0o600); err != nil {
				t.Fatal(err)
			}
			if err := os.Rename(path+".new", path); err != nil {
				t.Fatal(err)
			}
		}
		c, _ := tls.X509KeyPair(certPEM, keyPEM)
		return c.Leaf
	}
	first := write()
	opts := DefaultOptions("scheduler")
	opts.GRPCAddr, opts.HTTPAddr = "127.0.0.1:0", ""
	opts.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	opts.ShutdownNotice = 0 // tests stop at once
	opts.TLS = TLSOptions{CertFile: files.CertFile, KeyFile: files.KeyFile, CAFile: files.CAFile}
	srv, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	schedulerv1.RegisterSchedulerServiceServer(srv, fakeScheduler{})
	serveUntilCleanup(t, srv)

	// servedSerial is the serial of the certificate a new connection sees.
	servedSerial := func() string {
		conn := clientAs(t, ca, Identity{Service: AdminIdentity}, srv.GRPCAddr())
		var p peer.Peer
		if _, err := schedulerv1.NewSchedulerServiceClient(conn).ListWorkers(context.Background(), &schedulerv1.ListWorkersRequest{}, grpc.Peer(&p)); err != nil {
			t.Fatal(err)
		}
		conn.Close()
		return p.AuthInfo.(credentials.TLSInfo).State.PeerCertificates[0].SerialNumber.String()
	}
	if got := servedSerial(); got != first.SerialNumber.String() {
		t.Fatalf("served %s, want the first certificate %s", got, first.SerialNumber)
	}
	second := write()
	deadline := time.Now().Add(5 * time.Second)
	for servedSerial() != second.SerialNumber.String() {
		if time.Now().After(deadline) {
			t.Fatal("new connections still get the old certificate 5 s after the files changed")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestCertsCommandWritesAUsableMesh(t *testing.T) {
	dir := t.TempDir()
	var out, errb strings.Builder
	if code := CertsCommand("switchyard", []string{"--out", dir, "--workers", "w0,w1"}, &out, &errb); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	for _, f := range []string{"ca.crt", "scheduler.crt", "scheduler.key", "engine-shim-w1.crt", "admin.key"} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			t.Error(err)
		}
	}
	// The files make a server and a client that trust each other, with the
	// identities they name.
	src := &FileSource{CertFile: filepath.Join(dir, "engine-shim-w1.crt"), KeyFile: filepath.Join(dir, "engine-shim-w1.key"), CAFile: filepath.Join(dir, "ca.crt")}
	cert, pool, err := src.Current()
	if err != nil {
		t.Fatal(err)
	}
	id, err := verifyPeer([]*x509.Certificate{cert.Leaf}, pool, x509.ExtKeyUsageClientAuth, DefaultTrustDomain)
	if err != nil || id != (Identity{Service: "engine-shim", Instance: "w1"}) {
		t.Errorf("identity %v, %v", id, err)
	}
	// A second run keeps them.
	before, _ := os.ReadFile(filepath.Join(dir, "ca.crt"))
	CertsCommand("switchyard", []string{"--out", dir}, &out, &errb)
	if after, _ := os.ReadFile(filepath.Join(dir, "ca.crt")); string(after) != string(before) {
		t.Error("a second run without --force replaced the CA")
	}
}

// TestPublicHTTPS: a public HTTP port (the frontend's) serves HTTPS with its
// own certificate and asks clients for none, and its files rotate too.
func TestPublicHTTPS(t *testing.T) {
	ca, err := NewDevCA("")
	if err != nil {
		t.Fatal(err)
	}
	certPEM, keyPEM, err := ca.Issue(Identity{Service: "frontend"}, "localhost")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "pub.crt"), certPEM, 0o600)
	os.WriteFile(filepath.Join(dir, "pub.key"), keyPEM, 0o600)
	opts := DefaultOptions("frontend")
	opts.GRPCAddr, opts.HTTPAddr = "127.0.0.1:0", "127.0.0.1:0"
	opts.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	opts.ShutdownNotice = 0 // tests stop at once
	opts.PublicCertFile, opts.PublicKeyFile = filepath.Join(dir, "pub.crt"), filepath.Join(dir, "pub.key")
	srv, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	srv.HandleHTTP("GET /hello", http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "hi") }))
	serveUntilCleanup(t, srv)
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca.CertPEM)
	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}
	defer tr.CloseIdleConnections()
	resp, err := (&http.Client{Transport: tr, Timeout: 5 * time.Second}).Get("https://" + srv.HTTPAddr() + "/hello")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 || resp.TLS == nil {
		t.Fatalf("GET over public HTTPS: %d, TLS %v", resp.StatusCode, resp.TLS != nil)
	}
}

// A public port given half a pair, or a pair that does not load, is refused
// at start: it would serve plaintext, or fail every handshake, while it
// logged that it was serving.
func TestPublicTLSCheckedAtStart(t *testing.T) {
	dir := t.TempDir()
	garbage := filepath.Join(dir, "garbage.pem")
	os.WriteFile(garbage, []byte("not PEM"), 0o600)
	for _, tc := range []struct{ name, cert, key, want string }{
		{"a key alone", "", garbage, "go together"},
		{"a certificate alone", garbage, "", "go together"},
		{"missing files", filepath.Join(dir, "none.crt"), filepath.Join(dir, "none.key"), "none.crt"},
		{"files that are no pair", garbage, garbage, "--public-tls-cert/--public-tls-key"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			opts := DefaultOptions("frontend")
			opts.GRPCAddr, opts.HTTPAddr = "127.0.0.1:0", "127.0.0.1:0"
			opts.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
			opts.PublicCertFile, opts.PublicKeyFile = tc.cert, tc.key
			srv, err := New(opts)
			if err == nil {
				srv.Close()
				t.Fatal("New succeeded")
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("New: %v, want it to say %q", err, tc.want)
			}
		})
	}
}

// A trust domain no SPIFFE ID can hold is refused at start by name, not
// reported as a certificate without an identity.
func TestTrustDomainCheckedAtStart(t *testing.T) {
	ca, err := NewDevCA("")
	if err != nil {
		t.Fatal(err)
	}
	opts := secureSchedulerOptions(t, ca)
	opts.TLS.TrustDomain = "Switchyard.Local"
	srv, err := New(opts)
	if err == nil {
		srv.Close()
		t.Fatal("New succeeded")
	}
	if !strings.Contains(err.Error(), "--trust-domain") {
		t.Fatalf("New: %v, want it to name --trust-domain", err)
	}
}

// TestACLDocumented: docs/security.md's table is the allow-list the code
// enforces, row for row.
func TestACLDocumented(t *testing.T) {
	doc, err := os.ReadFile("../../docs/security.md")
	if err != nil {
		t.Fatal(err)
	}
	rows := map[string]string{}
	for _, line := range strings.Split(string(doc), "\n") {
		if !strings.HasPrefix(line, "| `/") {
			continue
		}
		cells := strings.Split(strings.Trim(line, "|"), "|")
		rows[strings.Trim(strings.TrimSpace(cells[0]), "`")] = strings.TrimSpace(cells[1])
	}
	for method, r := range acl {
		want := strings.Join(r.callers, ", ")
		if r.worker != nil {
			want += " (own worker only)"
		}
		if got, ok := rows[method]; !ok || got != want {
			t.Errorf("docs/security.md: %s is %q, the code says %q", method, got, want)
		}
		delete(rows, method)
	}
	for method := range rows {
		t.Errorf("docs/security.md lists %s, which the code has no rule for", method)
	}
}

// TestAReplicaCannotClaimAnIdentity: a peer presenting the server's own
// certificate (a replica: replicas share their service's) cannot send the
// header by which the server's REST gateway names its HTTP client, to be
// taken for an operator or another service, unary or over a call stream.
func TestAReplicaCannotClaimAnIdentity(t *testing.T) {
	ca, err := NewDevCA("")
	if err != nil {
		t.Fatal(err)
	}
	srv := secureScheduler(t, ca)
	replica := clientAs(t, ca, Identity{Service: "scheduler"}, srv.GRPCAddr())
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	claim := func(id string) context.Context { return metadata.AppendToOutgoingContext(ctx, restPeerKey, id) }

	if _, err := schedulerv1.NewSchedulerServiceClient(replica).ListWorkers(claim("admin"), &schedulerv1.ListWorkersRequest{}); status.Code(err) != codes.PermissionDenied {
		t.Errorf("ListWorkers as a replica claiming admin: %v, want PERMISSION_DENIED", err)
	}
	if err := register(replica, "worker-0"); status.Code(err) != codes.PermissionDenied {
		t.Fatalf("RegisterWorker as a replica: %v, want PERMISSION_DENIED", err)
	}
	_, err = schedulerv1.NewSchedulerServiceClient(replica).RegisterWorker(claim("engine-shim/worker-0"),
		&schedulerv1.RegisterWorkerRequest{Worker: &workerv1.Worker{WorkerId: "worker-0"}})
	if status.Code(err) != codes.PermissionDenied {
		t.Errorf("RegisterWorker as a replica claiming worker-0's shim: %v, want PERMISSION_DENIED", err)
	}

	// A call stream opened with the claim: its calls carry the stream's headers.
	stream, err := callsv1.NewCallServiceClient(replica).Calls(claim("admin"))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := proto.Marshal(&schedulerv1.ListWorkersRequest{})
	if err := stream.Send(&callsv1.CallsRequest{CallId: 1, Method: schedulerv1.SchedulerService_ListWorkers_FullMethodName, Request: body}); err != nil {
		t.Fatal(err)
	}
	resp, err := stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	if err := decodeAnswer(resp, new(schedulerv1.ListWorkersResponse)); status.Code(err) != codes.PermissionDenied {
		t.Errorf("ListWorkers over a call stream opened claiming admin: %v, want PERMISSION_DENIED", err)
	}
	stream.CloseSend()
}

// swappableSource is a CertSource whose material a test replaces.
type swappableSource struct {
	mu   sync.Mutex
	cert *tls.Certificate
	pool *x509.CertPool
}

func (s *swappableSource) Current() (*tls.Certificate, *x509.CertPool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cert, s.pool, nil
}

func (s *swappableSource) set(src CertSource) {
	cert, pool, _ := src.Current()
	s.mu.Lock()
	s.cert, s.pool = cert, pool
	s.mu.Unlock()
}

// TestAResumedSessionMeetsTheCurrentCA: a client that resumes an earlier
// TLS session (a ticket is good for days) is checked against the CA of the
// moment, as a new handshake is: rotating the CA cuts off the old one's
// certificates on the next connection, resumed or not.
func TestAResumedSessionMeetsTheCurrentCA(t *testing.T) {
	oldCA, err := NewDevCA("")
	if err != nil {
		t.Fatal(err)
	}
	newCA, err := NewDevCA("")
	if err != nil {
		t.Fatal(err)
	}
	server := &swappableSource{}
	oldSrc, _ := oldCA.Source(Identity{Service: "scheduler"})
	server.set(oldSrc)
	lis, err := tls.Listen("tcp", "127.0.0.1:0", tlsConfigs{src: server, trustDomain: DefaultTrustDomain}.server(false))
	if err != nil {
		t.Fatal(err)
	}
	defer lis.Close()
	go func() {
		for {
			c, err := lis.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				if c.(*tls.Conn).Handshake() == nil {
					c.Write([]byte{1}) // after the session ticket
				}
			}()
		}
	}()

	certPEM, keyPEM, err := oldCA.Issue(Identity{Service: AdminIdentity})
	if err != nil {
		t.Fatal(err)
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	client := &tls.Config{MinVersion: tls.VersionTLS13, Certificates: []tls.Certificate{cert},
		InsecureSkipVerify: true, ClientSessionCache: tls.NewLRUClientSessionCache(4)}
	connect := func() (resumed bool, err error) {
		c, err := tls.Dial("tcp", lis.Addr().String(), client)
		if err != nil {
			return false, err
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(5 * time.Second))
		_, err = io.ReadFull(c, make([]byte, 1)) // a refused certificate shows here in TLS 1.3
		return c.ConnectionState().DidResume, err
	}
	if _, err := connect(); err != nil {
		t.Fatalf("a certificate of the CA: %v", err)
	}
	if resumed, err := connect(); err != nil || !resumed {
		t.Fatalf("resuming with the CA unchanged: resumed %v, %v; want a resumed session", resumed, err)
	}
	newSrc, _ := newCA.Source(Identity{Service: "scheduler"})
	server.set(newSrc) // the old CA is no longer trusted
	if resumed, err := connect(); err == nil {
		t.Errorf("a certificate of the replaced CA was let in (resumed session: %v)", resumed)
	}
}

// TestIdentityIsTheWholeSPIFFEID: a certificate names an identity only
// with exactly that identity's SPIFFE ID; an ID that merely begins like
// one (a trailing slash, an escaped slash, a query, a fragment, a user) is
// another workload's, not that service's.
func TestIdentityIsTheWholeSPIFFEID(t *testing.T) {
	for _, tt := range []struct {
		uri  string
		want Identity // zero: no identity
	}{
		{"spiffe://switchyard.local/switchyard/admin", Identity{Service: "admin"}},
		{"spiffe://switchyard.local/switchyard/engine-shim/worker-0", Identity{Service: "engine-shim", Instance: "worker-0"}},
		{"spiffe://switchyard.local/switchyard/admin/", Identity{}},
		{"spiffe://switchyard.local/switchyard/admin%2Fworker-0", Identity{}},
		{"spiffe://switchyard.local/switchyard/engine-shim%2Fworker-0", Identity{}},
		{"spiffe://switchyard.local/switchyard/admin?team=x", Identity{}},
		{"spiffe://switchyard.local/switchyard/admin#x", Identity{}},
		{"spiffe://someone@switchyard.local/switchyard/admin", Identity{}},
		{"spiffe://other.domain/switchyard/admin", Identity{}},
		{"spiffe://switchyard.local/elsewhere/admin", Identity{}},
	} {
		u, err := url.Parse(tt.uri)
		if err != nil {
			t.Fatal(err)
		}
		got, err := identityOf(&x509.Certificate{URIs: []*url.URL{u}}, DefaultTrustDomain)
		if got != tt.want || (err == nil) != (tt.want != Identity{}) {
			t.Errorf("%s: identity %+v, %v; want %+v", tt.uri, got, err, tt.want)
		}
	}
}

// FuzzIdentityOf: whatever URI SANs a peer's certificate holds, an identity
// read from them is named by one of them exactly, and survives the trip
// through the gateway's header (Identity.String, parseIdentity).
func FuzzIdentityOf(f *testing.F) {
	for _, s := range []string{
		"spiffe://switchyard.local/switchyard/admin",
		"spiffe://switchyard.local/switchyard/engine-shim/worker-0",
		"spiffe://switchyard.local/switchyard/admin/",
		"spiffe://switchyard.local/switchyard/admin%2Fx",
		"spiffe://switchyard.local/switchyard/a/b/c",
		"spiffe://switchyard.local/switchyard//x",
		"spiffe://u@switchyard.local/switchyard/admin?q#f",
	} {
		f.Add(s, "")
	}
	f.Fuzz(func(t *testing.T, a, b string) {
		var uris []*url.URL
		for _, s := range []string{a, b} {
			if u, err := url.Parse(s); err == nil {
				uris = append(uris, u)
			}
		}
		id, err := identityOf(&x509.Certificate{URIs: uris}, DefaultTrustDomain)
		if err != nil {
			return
		}
		if id.Service == "" {
			t.Fatalf("%q %q: an identity with no service", a, b)
		}
		named := false
		for _, u := range uris {
			named = named || u.String() == id.URI(DefaultTrustDomain).String()
		}
		if !named {
			t.Fatalf("%q %q: identity %+v (%s) is none of the certificate's URIs", a, b, id, id.URI(DefaultTrustDomain))
		}
		if back, ok := parseIdentity(id.String()); !ok || back != id {
			t.Fatalf("%+v came back from the gateway's header as %+v", id, back)
		}
	})
}

// TestARotationKeepsTheServicesIdentity: certificates rotated in that name
// another identity (secrets mixed up) are not taken up, as New refuses
// them at start: the service goes on presenting its own, as a server and
// as a client, rather than act in the mesh as an operator or another
// service.
func TestARotationKeepsTheServicesIdentity(t *testing.T) {
	ca, err := NewDevCA("")
	if err != nil {
		t.Fatal(err)
	}
	own, _ := ca.Source(Identity{Service: "scheduler"})
	src := &swappableSource{}
	src.set(own)
	srv := secureScheduler(t, ca, func(o *Options) { o.TLS = TLSOptions{Source: src} })
	servedIdentity := func() Identity {
		conn := clientAs(t, ca, Identity{Service: AdminIdentity}, srv.GRPCAddr())
		defer conn.Close()
		var p peer.Peer
		if _, err := schedulerv1.NewSchedulerServiceClient(conn).ListWorkers(context.Background(), &schedulerv1.ListWorkersRequest{}, grpc.Peer(&p)); err != nil {
			t.Fatal(err)
		}
		id, _ := identityOf(p.AuthInfo.(credentials.TLSInfo).State.PeerCertificates[0], ca.TrustDomain)
		return id
	}
	if got := servedIdentity(); got != (Identity{Service: "scheduler"}) {
		t.Fatalf("served %v before the rotation", got)
	}
	admin, _ := ca.Source(Identity{Service: AdminIdentity})
	src.set(admin)
	if got := servedIdentity(); got != (Identity{Service: "scheduler"}) {
		t.Errorf("after a rotation to an operator's certificate the server presents %v, want its own (scheduler)", got)
	}
	cert, err := srv.tls.client().GetClientCertificate(&tls.CertificateRequestInfo{})
	if err != nil {
		t.Fatal(err)
	}
	if id, _ := identityOf(cert.Leaf, ca.TrustDomain); id != (Identity{Service: "scheduler"}) {
		t.Errorf("after a rotation to an operator's certificate the service dials as %v, want scheduler", id)
	}
}
