public import AsyncHTTPClient
public import Logging
public import NIOCore
public import NIOPosix
public import CoreMetrics
public import Tracing
package import NIOHTTP1
import NIOConcurrencyHelpers

/// What every client of this package runs on: threads, HTTP clients, a logger and a clock.
///
/// Clients of different protocols in one process should share one runtime, so they share event
/// loops and connection pools. ``shared`` is the process-wide default.
public struct RealtimeRuntime: Sendable {
    /// The values, behind one reference: clients, sessions and drivers each keep a copy of their
    /// runtime, and so do the async frames of a connection's task (for the connection's life), so
    /// a copy costs 8 bytes instead of about 300. A setter copies the storage when it is shared.
    private final class Storage: Sendable {
        let eventLoopGroup: any EventLoopGroup
        let httpClient: HTTPClient?
        let http: HTTPConnectionOptions
        let logger: Logger
        let clock: any Clock<Duration>
        let timers: TimerQueue
        let metricsFactory: (any MetricsFactory)?
        let tracer: (any Tracer)?
        let httpClients: HTTPClientCache
        let proxy: ProxyConfiguration
        let setUps: SetUpLimiter
        /// This storage pinned to one of its event loops (``RealtimeRuntime/pinned(to:)``), made once
        /// per loop: every session that pins its runtime shares them.
        let pinnedToLoop = NIOLockedValueBox<[ObjectIdentifier: Storage]>([:])
        /// The task executor of a storage whose group is one event loop (``RealtimeRuntime/taskExecutor``),
        /// made once: an `EventLoopTaskExecutor`, kept untyped for the platforms without task executors.
        let executor = NIOLockedValueBox<(any Sendable)?>(nil)

        init(
            eventLoopGroup: any EventLoopGroup, httpClient: HTTPClient?, http: HTTPConnectionOptions, logger: Logger,
            clock: any Clock<Duration>, timers: TimerQueue, metricsFactory: (any MetricsFactory)?, tracer: (any Tracer)?,
            httpClients: HTTPClientCache, proxy: ProxyConfiguration, setUps: SetUpLimiter
        ) {
            self.eventLoopGroup = eventLoopGroup
            self.httpClient = httpClient
            self.http = http
            self.logger = logger
            self.clock = clock
            self.timers = timers
            self.metricsFactory = metricsFactory
            self.tracer = tracer
            self.httpClients = httpClients
            self.proxy = proxy
            self.setUps = setUps
        }

        /// A copy with some values replaced.
        func with(
            eventLoopGroup: (any EventLoopGroup)? = nil, httpClient: HTTPClient?? = nil, http: HTTPConnectionOptions? = nil,
            logger: Logger? = nil, clock: (any Clock<Duration>)? = nil, metricsFactory: (any MetricsFactory)?? = nil,
            tracer: (any Tracer)?? = nil, proxy: ProxyConfiguration? = nil
        ) -> Storage {
            Storage(
                eventLoopGroup: eventLoopGroup ?? self.eventLoopGroup, httpClient: httpClient ?? self.httpClient, http: http ?? self.http,
                logger: logger ?? self.logger, clock: clock ?? self.clock, timers: clock.map { TimerQueue(clock: $0) } ?? timers,
                metricsFactory: metricsFactory ?? self.metricsFactory, tracer: tracer ?? self.tracer, httpClients: httpClients,
                proxy: proxy ?? self.proxy, setUps: setUps)
        }
    }

    private var storage: Storage

    /// This runtime with `eventLoop` as its whole event loop group: what a connection that keeps to
    /// one event loop runs on. Made once per event loop and shared, not a copy of the storage per
    /// connection.
    package func pinned(to eventLoop: any EventLoop) -> RealtimeRuntime {
        if storage.eventLoopGroup === eventLoop { return self }
        var pinned = self
        pinned.storage = storage.pinnedToLoop.withLockedValue { cache in
            if let existing = cache[ObjectIdentifier(eventLoop)] { return existing }
            let made = storage.with(eventLoopGroup: eventLoop)
            cache[ObjectIdentifier(eventLoop)] = made
            return made
        }
        return pinned
    }

    /// This runtime pinned to the next event loop of its group: what one client runs every
    /// connection on, reconnects included, so that its messages are read, and its consumers can run,
    /// on one known thread (the client's `eventLoop` and `taskExecutor`). A runtime whose group is
    /// one event loop is returned as it is.
    package func pinnedToOneLoop() -> RealtimeRuntime {
        if storage.eventLoopGroup is any EventLoop { return self }
        return pinned(to: storage.eventLoopGroup.next())
    }

    /// The event loop of a runtime pinned to one (``pinnedToOneLoop()``); for another runtime, the
    /// next loop of its group.
    package var eventLoop: any EventLoop {
        (storage.eventLoopGroup as? any EventLoop) ?? storage.eventLoopGroup.next()
    }

    /// A task executor on ``eventLoop``, made once per pinned runtime.
    @available(macOS 15, iOS 18, tvOS 18, watchOS 11, *)
    package var taskExecutor: EventLoopTaskExecutor {
        let loop = eventLoop
        return storage.executor.withLockedValue { cached in
            if let executor = cached as? EventLoopTaskExecutor, executor.eventLoop === loop { return executor }
            let made = EventLoopTaskExecutor(loop)
            cached = made
            return made
        }
    }

    /// The event loops every connection runs on.
    public var eventLoopGroup: any EventLoopGroup {
        get { storage.eventLoopGroup }
        set { storage = storage.with(eventLoopGroup: newValue) }
    }
    /// An HTTP client of yours for the long-polling and POST requests, or nil (the default) for the
    /// runtime's own clients (see ``HTTPConnectionOptions``). Event streams (SSE) do not use it:
    /// each has a connection of its own, through ``proxy``, with its request's ``TLSOptions``. Yours is used as it is
    /// configured (its pool limits, connection retries and proxy apply; ``proxy`` does not), and
    /// each `https://` request carries its ``TLSOptions`` (trust roots, client certificate, server
    /// name) to it, except requests whose TLS options pin keys: those always go through the
    /// runtime's own clients, which check the pin on the connection's handshake. A client you pass
    /// in is yours to shut down.
    public var httpClient: HTTPClient? {
        get { storage.httpClient }
        set { storage = storage.with(httpClient: .some(newValue)) }
    }
    /// How the runtime's own HTTP clients connect and pool connections.
    public var http: HTTPConnectionOptions {
        get { storage.http }
        set { storage = storage.with(http: newValue) }
    }
    /// The logger. The default discards everything; pass your own to see what happens.
    public var logger: Logger {
        get { storage.logger }
        set { storage = storage.with(logger: newValue) }
    }
    /// The clock every timer reads (heartbeats, timeouts, backoff). Tests inject a manual clock.
    /// Setting it gives the runtime a timer queue of its own on the new clock.
    public var clock: any Clock<Duration> {
        get { storage.clock }
        set { storage = storage.with(clock: newValue) }
    }
    /// The deadlines of every client on this runtime, on ``clock`` (one task sleeps for all of them).
    package var timers: TimerQueue { storage.timers }
    /// Where clients report their metrics (Docs/Metrics.md). Nil (the default): the process's
    /// `MetricsSystem.factory`, as bootstrapped when a client is made.
    public var metricsFactory: (any MetricsFactory)? {
        get { storage.metricsFactory }
        set { storage = storage.with(metricsFactory: .some(newValue)) }
    }
    /// The tracer of connect, call and request spans (Docs/Metrics.md, "Tracing"). Nil (the
    /// default): the process's `InstrumentationSystem.tracer`, when a span starts (while none is
    /// bootstrapped, looked up again at most once a second).
    public var tracer: (any Tracer)? {
        get { storage.tracer }
        set { storage = storage.with(tracer: .some(newValue)) }
    }
    /// How connections reach their servers: ``ProxyConfiguration/environment`` by default
    /// (`https_proxy`, `http_proxy`, `all_proxy`, `no_proxy`, as curl reads them). It applies to
    /// WebSocket connections, event streams and the runtime's own HTTP clients; an ``httpClient`` of yours keeps
    /// its own proxy setting. Give one client another proxy with a copy of the runtime (copies share
    /// the event loops and connection pools).
    public var proxy: ProxyConfiguration {
        get { storage.proxy }
        set { storage = storage.with(proxy: newValue) }
    }
    /// The runtime's own HTTP clients, one per distinct TLS setting, shared by every copy of this
    /// runtime and shut down when the last copy is gone.
    var httpClients: HTTPClientCache { storage.httpClients }

    /// Makes a runtime.
    /// - Parameters:
    ///   - eventLoopGroup: the event loops connections run on (the process's shared group by default).
    ///   - httpClient: an HTTP client to use instead of the runtime's own (it keeps its own limits).
    ///   - http: the connection limits of the runtime's own HTTP clients.
    ///   - logger: where the clients log (nothing by default; the clients log at debug at most).
    ///   - clock: the clock of every timer (a manual clock in tests).
    ///   - metricsFactory: where the clients report metrics (nil: `MetricsSystem.factory`).
    ///   - tracer: the tracer of the clients' spans (nil: `InstrumentationSystem.tracer`).
    ///   - proxy: how connections reach their servers (the environment's proxy variables by default).
    public init(
        eventLoopGroup: any EventLoopGroup = MultiThreadedEventLoopGroup.singleton,
        httpClient: HTTPClient? = nil,
        http: HTTPConnectionOptions = .init(),
        logger: Logger = Logger(label: "swift-realtime", factory: { _ in SwiftLogNoOpLogHandler() }),
        clock: any Clock<Duration> = ContinuousClock(),
        metricsFactory: (any MetricsFactory)? = nil,
        tracer: (any Tracer)? = nil,
        proxy: ProxyConfiguration = .environment
    ) {
        storage = Storage(
            eventLoopGroup: eventLoopGroup, httpClient: httpClient, http: http, logger: logger, clock: clock,
            timers: TimerQueue(clock: clock), metricsFactory: metricsFactory, tracer: tracer,
            httpClients: HTTPClientCache(eventLoopGroup: eventLoopGroup), proxy: proxy, setUps: SetUpLimiter())
    }

    /// The process-wide runtime: NIO's singleton event loop group, the runtime's own HTTP clients
    /// with the default ``HTTPConnectionOptions``, a silent logger and the continuous clock.
    public static let shared = RealtimeRuntime()

    /// A copy with another logger, keeping everything else shared.
    public func logging(to logger: Logger) -> RealtimeRuntime {
        var copy = self
        copy.logger = logger
        return copy
    }

    /// The logger handed to the libraries underneath (AsyncHTTPClient, swift-websocket): the same
    /// logger, never below `.debug`. Their trace lines print message bytes (AsyncHTTPClient the
    /// response heads and bodies, so a negotiate reply's `accessToken` or a `Set-Cookie`;
    /// swift-websocket the first bytes of every frame), and tokens must never reach a log.
    package var libraryLogger: Logger {
        guard logger.logLevel < .debug else { return logger }
        var capped = logger
        capped.logLevel = .debug
        return capped
    }

    /// Bounds the WebSocket connections, event streams and SignalR connects being set up at once per host
    /// (``HTTPConnectionOptions/maxConnectingPerHost``); shared by every copy of the runtime.
    package var setUpLimiter: SetUpLimiter { storage.setUps }

    /// The tracer spans go to: ``tracer``, or the process's (``ProcessTracer``).
    package var activeTracer: any Tracer { tracer ?? ProcessTracer.current }

    /// Writes the propagation headers of `context` (or of the task's current context) into
    /// `headers`, when a span is active: the tracer decides the names (W3C `traceparent` with a W3C
    /// propagator such as swift-otel's).
    package func injectTraceContext(_ context: ServiceContext?, into headers: inout HTTPHeaders) {
        guard let context = context ?? ServiceContext.current else { return }
        activeTracer.inject(context, into: &headers, using: HTTPHeadersInjector())
    }

    /// Sleeps on the runtime's clock.
    package func sleep(for duration: Duration) async throws {
        guard duration > .zero else { return }
        try await clock.sleep(for: duration)
    }

    /// The HTTP client for a request to `endpoint` with these TLS options, and the proxy it goes
    /// through (nil: none, or the app's own client, which keeps its own proxy setting).
    func httpClient(for tls: TLSOptions, endpoint: Endpoint, setUp: Bool = false) throws -> (HTTPClient, ProxyServer?) {
        let secure = endpoint.isSecure
        let pinned = secure && !tls.pinnedPublicKeySHA256.isEmpty
        if let httpClient, !pinned { return (httpClient, nil) }
        let proxyServer = try proxy.server(for: endpoint)
        var options = http
        if setUp { options.maxConnectionsPerHost = min(options.maxConnectionsPerHost, max(1, options.maxConnectingPerHost)) }
        return (try httpClients.client(tls: secure ? tls : nil, options: options, proxy: proxyServer), proxyServer)
    }
}

/// How the runtime's connections are made: its own HTTP clients (long polls, POSTs) and event streams.
///
/// Every event stream (SSE) has a connection of its own, outside any pool: 10,000 EventSource
/// streams to one server are 10,000 connections; the operating system's descriptor limit is the
/// bound, and a connect it refuses fails the stream with ``RealtimeError/Code/connectFailed``. Long
/// polls hold a pooled connection while they wait, so the pool does not cap them by default. Set a
/// lower ``maxConnectionsPerHost`` to cap the pool: a request that finds it full then waits for a
/// free connection at most ``connectTimeout`` and fails with ``RealtimeError/Code/timeout``; it
/// never waits silently.
public struct HTTPConnectionOptions: Sendable, Hashable {
    /// Pooled connections per host (scheme, host, port) open at once; event streams are not
    /// pooled and not counted. Default 1,048,576 (no practical cap: long polls must not wait behind
    /// each other).
    public var maxConnectionsPerHost: Int
    /// How long a request may take to get a connection (TCP connect and TLS handshake, or a free
    /// one from a full pool); for an event stream, the TCP connect. Default 10 s.
    public var connectTimeout: Duration
    /// How long an unused connection stays in the pool. Default 60 s.
    ///
    /// This includes a connection whose set-up (TCP connect, proxy tunnel, TLS handshake) was under
    /// way when its request was cancelled, for example a long poll stopped while it was connecting:
    /// the set-up finishes, the connection waits here unused for the next request to that host, and
    /// is closed after this long. An event stream closed while it connects closes its connection at
    /// once.
    public var idleTimeout: Duration
    /// WebSocket connections being set up at once to one host and port (TCP connect, proxy tunnel,
    /// TLS handshake, upgrade), across every client of the runtime. Default 64. Past it a set-up
    /// waits its turn, first come first served, and the wait counts toward its connect timeout; a
    /// waiting set-up holds no task. A SignalR connect takes its turn before its negotiate and
    /// keeps it through the handshake, waiting at most ``connectTimeout``. An event stream (SSE,
    /// SignalR's and Spreadbot's SSE transports) takes its turn before its request goes out and
    /// gives it back when the response head arrives or the request ends; the request's head
    /// timeout counts from when it goes out (every request ahead in line ends within its own, so
    /// the line always moves).
    ///
    /// The same bound applies to SignalR's negotiate requests: they go through a pool of at most
    /// this many connections per host, where a burst of them would otherwise leave one idle
    /// connection per request in the pool for ``idleTimeout``.
    ///
    /// What a set-up allocates is mostly freed once the connection is open, but freed memory
    /// scattered between thousands of open connections stays with the process.
    public var maxConnectingPerHost: Int

    /// Makes options; every parameter is the property of the same name.
    public init(
        maxConnectionsPerHost: Int = 1 << 20, connectTimeout: Duration = .seconds(10), idleTimeout: Duration = .seconds(60),
        maxConnectingPerHost: Int = 64
    ) {
        self.maxConnectionsPerHost = maxConnectionsPerHost
        self.connectTimeout = connectTimeout
        self.idleTimeout = idleTimeout
        self.maxConnectingPerHost = maxConnectingPerHost
    }
}

/// Writes trace propagation values as HTTP headers (replacing a value of the same name).
struct HTTPHeadersInjector: Injector {
    func inject(_ value: String, forKey key: String, into headers: inout HTTPHeaders) {
        headers.replaceOrAdd(name: key, value: value)
    }
}
