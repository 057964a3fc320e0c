public import NIOCore
public import NIOHTTP1
public import RealtimeCore

/// Options for ``EventSource``. Add options as fields here, never as initialiser overloads.
public struct EventSourceConfiguration: Sendable {
    /// Extra request headers (authorisation, cookies...). Never logged. `Accept`,
    /// `Cache-Control` and `Last-Event-ID` are set by the client.
    public var headers: HTTPHeaders
    /// Headers made anew before every connection (a bearer token that rotates), set over
    /// ``headers`` (a name it returns replaces the static value). With a provider, a 401 answer is
    /// retried once with the provider's next headers (the next attempt calls it again) before it
    /// counts as a failure; two 401s in a row end the stream as ``shouldRetry`` says. A provider
    /// that throws fails the attempt with `authenticationFailed`, which is
    /// retried. Nil (the default): none.
    public var headersProvider: (@Sendable () async throws -> HTTPHeaders)? = nil
    /// Cookies: every request sends the store's matching cookies and stores the response's
    /// `Set-Cookie` (a session cookie set by the server survives reconnects). Nil (the default): none.
    public var cookies: CookieStore? = nil
    /// GET by default; POST, REPORT or any other method with ``body``.
    public var method: HTTPMethod
    /// The request body, for a `method` that takes one (nil: none).
    public var body: ByteBuffer?
    /// The last event ID to send on the first connection (`Last-Event-ID`), for resuming.
    public var lastEventId: String?
    /// The reconnection time before a server sets one with `retry:`. Default 3 s.
    public var reconnectionTime: Duration
    /// The longest wait between attempts: consecutive failures double the wait up to this.
    public var maxReconnectionTime: Duration
    /// Spread of each wait, 0...1 (0.5 = ±50 %).
    public var randomizationFactor: Double
    /// Give up after this many consecutive failed attempts; nil retries forever.
    public var maxReconnectAttempts: Int?
    /// Reconnect when no bytes (not even comments) arrive for this long. Default 5 minutes; nil
    /// disables. It fires at the last byte plus this time (plus the clock's scheduling delay, a few
    /// milliseconds); time the client spends not reading because the consumer is behind does not count.
    public var idleTimeout: Duration?
    /// Limit for the response head (connect, TLS, status, headers), counted from when the request
    /// goes out: a stream that first waits its turn among the set-ups to its host
    /// (`HTTPConnectionOptions.maxConnectingPerHost`) is not failed for that wait.
    public var connectTimeout: Duration
    /// Consulted before every reconnect attempt.
    public var reachability: any Reachability
    /// How TLS is checked: trust roots, a client certificate, pins (the system's trust roots by default).
    public var tls: TLSOptions
    /// The largest event held in memory; a larger one ends the stream with `messageTooLarge`.
    /// Default 64 MiB (browsers set no limit; this keeps a runaway stream from taking all memory).
    public var maxEventSize: Int
    /// Called with every comment line (`: keep-alive`), which are otherwise ignored.
    public var onComment: (@Sendable (String) -> Void)?
    /// Deliver comments in ``EventSource/updates`` too, in order with the events. Default false.
    public var includeComments: Bool = false
    /// How many updates (events, comments, notices) wait for the consumer of ``EventSource/events``
    /// or ``EventSource/updates`` at most; when full, the client stops reading. Default 16.
    public var bufferSize: Int = 16
    /// The `client` dimension of this source's metrics (Docs/Metrics.md). Default `default`.
    public var clientLabel = "default"
    /// Decides whether an error is retried. The default retries network failures, clean ends of
    /// stream and idle timeouts; it does not retry a bad status, a wrong content type, an oversized
    /// event, a TLS failure or an invalid URL (the standard says fail the connection).
    public var shouldRetry: @Sendable (RealtimeError) -> Bool

    /// Makes a configuration; every parameter is the property of the same name.
    public init(
        headers: HTTPHeaders = [:],
        method: HTTPMethod = .GET,
        body: ByteBuffer? = nil,
        lastEventId: String? = nil,
        reconnectionTime: Duration = .seconds(3),
        maxReconnectionTime: Duration = .seconds(30),
        randomizationFactor: Double = 0.5,
        maxReconnectAttempts: Int? = nil,
        idleTimeout: Duration? = .seconds(300),
        connectTimeout: Duration = .seconds(30),
        reachability: any Reachability = PollingReachability(),
        tls: TLSOptions = .default,
        maxEventSize: Int = 64 << 20,
        onComment: (@Sendable (String) -> Void)? = nil,
        shouldRetry: @escaping @Sendable (RealtimeError) -> Bool = EventSourceConfiguration.defaultShouldRetry
    ) {
        self.headers = headers
        self.method = method
        self.body = body
        self.lastEventId = lastEventId
        self.reconnectionTime = reconnectionTime
        self.maxReconnectionTime = maxReconnectionTime
        self.randomizationFactor = randomizationFactor
        self.maxReconnectAttempts = maxReconnectAttempts
        self.idleTimeout = idleTimeout
        self.connectTimeout = connectTimeout
        self.reachability = reachability
        self.tls = tls
        self.maxEventSize = maxEventSize
        self.onComment = onComment
        self.shouldRetry = shouldRetry
    }

    /// The default ``shouldRetry``: retries network errors, drops and timeouts, as a WHATWG
    /// EventSource does, and a 500, 502, 503 or 504 (a server restarting or busy, or a proxy that
    /// cannot reach it: a plain `http://` stream through an HTTP proxy gets the proxy's own answer),
    /// as the `eventsource` package for Node.js does; gives up on any other bad status, a bad
    /// content type, an oversized event, an invalid URL, a TLS or pinning failure and a cancellation.
    public static let defaultShouldRetry: @Sendable (RealtimeError) -> Bool = { error in
        switch error.code {
        case .badStatus:
            [500, 502, 503, 504].contains(error.status?.code ?? 0)
        case .badContentType, .messageTooLarge, .invalidURL, .tlsFailure, .certificatePinMismatch, .cancelled:
            false
        default:
            true
        }
    }
}

/// The WHATWG `readyState`.
public enum EventSourceState: Int, Sendable {
    /// Connecting, the first time or again after a drop.
    case connecting = 0
    /// The stream is open; events arrive.
    case open = 1
    /// Closed for good: by `close()`, a 204, or the reconnect policy giving up.
    case closed = 2
}
