public import Foundation
public import RealtimeCore
public import NIOHTTP1

/// The stream transports, in the order ``Spreadbot/establishConnection(path:)`` tries them.
public enum SpreadbotTransport: String, Sendable, CaseIterable, CustomStringConvertible {
    /// `ws(s)://<base>/<path>`: JSON envelopes in text frames, binary data in binary frames.
    case webSocket
    /// `GET <base>/<path>` with `Accept: text/event-stream`.
    case serverSentEvents
    /// `GET <base>/<path>?since=<last id>` every ``SpreadbotConfiguration/pollInterval``.
    case polling

    /// A readable summary, for logs and messages.
    public var description: String { rawValue }
}

/// The seed's three connection states.
public enum SpreadbotState: String, Sendable, CustomStringConvertible {
    /// Opening a transport, first or after a drop (reconnect attempts included).
    case connecting
    /// A transport is open; sends go out at once.
    case connected
    /// Not connected and not trying: before ``Spreadbot/establishConnection(path:)``, after
    /// ``Spreadbot/closeConnection()``, after the reconnect attempts ran out or a fatal error.
    case disconnected

    /// A readable summary, for logs and messages.
    public var description: String { rawValue }
}

/// The OAuth tokens in use. Printing a value never shows the tokens.
public struct SpreadbotTokens: Sendable, Equatable, CustomStringConvertible, CustomDebugStringConvertible {
    /// The access token, sent as `Authorization: Bearer`.
    public var accessToken: String?
    /// The refresh token, sent to the token endpoint when the access token is refused.
    public var refreshToken: String?
    /// `expires_in` from the last refresh, in seconds, if the server sent it.
    public var expiresIn: Int?

    /// Makes tokens; every parameter is the property of the same name.
    public init(accessToken: String?, refreshToken: String?, expiresIn: Int? = nil) {
        self.accessToken = accessToken
        self.refreshToken = refreshToken
        self.expiresIn = expiresIn
    }

    /// A readable summary, for logs and messages.
    public var description: String {
        "SpreadbotTokens(accessToken: \(accessToken == nil ? "nil" : "<redacted>"), refreshToken: \(refreshToken == nil ? "nil" : "<redacted>"), expiresIn: \(expiresIn.map(String.init) ?? "nil"))"
    }
    /// The same text as `description`.
    public var debugDescription: String { description }
}

/// The data of a stream message: text (WebSocket text envelopes, SSE, polling) or bytes (WebSocket
/// binary frames). Prints as its text, or as a byte count.
public enum SpreadbotData: Sendable, Equatable, CustomStringConvertible {
    /// Text (WebSocket text envelopes, SSE, polling).
    case text(String)
    /// Bytes (WebSocket binary frames).
    case binary(Data)

    /// The text, or the bytes decoded as UTF-8 (nil if they are not UTF-8).
    public var string: String? {
        switch self {
        case .text(let text): text
        case .binary(let data): String(data: data, encoding: .utf8)
        }
    }

    /// The size in bytes (text as UTF-8).
    public var byteCount: Int {
        switch self {
        case .text(let text): text.utf8.count
        case .binary(let data): data.count
        }
    }

    /// The bytes: binary data as it came, text as UTF-8.
    public var data: Data {
        switch self {
        case .text(let text): Data(text.utf8)
        case .binary(let data): data
        }
    }

    /// A readable summary, for logs and messages.
    public var description: String {
        switch self {
        case .text(let text): text
        case .binary(let data): "<\(data.count) bytes>"
        }
    }
}

/// One message from the stream: the seed's `(id, event, data)`.
public struct SpreadbotMessage: Sendable, Equatable {
    /// The iteration: the envelope's or event's id ("" when the server sent none).
    public var id: String
    /// The path the message belongs to (the SSE event type, "message" when the event had none).
    public var event: String
    /// The message's data.
    public var data: SpreadbotData
    /// The transport it arrived on.
    public var transport: SpreadbotTransport

    /// Makes a message; every parameter is the property of the same name.
    public init(id: String, event: String, data: SpreadbotData, transport: SpreadbotTransport) {
        self.id = id
        self.event = event
        self.data = data
        self.transport = transport
    }
}

/// Everything a ``Spreadbot`` or ``SpreadbotREST`` client needs. The seed's keys are the first six
/// properties; `init(dictionary:)` reads them from the seed's `[String: Any]` form.
///
/// Printing a configuration never shows the tokens or the credentials.
public struct SpreadbotConfiguration: Sendable, CustomStringConvertible {
    /// `http://` or `https://` base of every stream and REST path (a base path is kept).
    public var baseURL: String
    /// The OAuth token endpoint for refreshes; nil: a 401 fails with `authenticationFailed`.
    public var authURL: String?
    /// The access token, sent as `Authorization: Bearer`.
    public var accessToken: String?
    /// The refresh token, sent to ``authURL`` when the access token is refused.
    public var refreshToken: String?
    /// `base64(client_id:client_secret)`, sent as HTTP Basic to ``authURL``.
    public var base64Credentials: String?
    /// Log the client's activity (connects, fallbacks, retries, refreshes) at `info` on the
    /// runtime's logger instead of `debug`. Never logs tokens, credentials or bodies.
    public var log: Bool

    /// Transports tried, in order, on every (re)connect; a transport is tried only when the one
    /// before it could not be established. Default: WebSocket, SSE, polling.
    public var transports: [SpreadbotTransport]
    /// Time between polls on the polling transport. Default 15 s.
    public var pollInterval: Duration
    /// Reconnect attempts after an unexpected drop before giving up. Default 3.
    public var maxReconnectAttempts: Int
    /// Delay before reconnect attempt 1; it doubles per attempt (±50 % jitter), up to ``maxReconnectDelay``. Default 1 s.
    public var reconnectDelay: Duration
    /// Default 10 s.
    public var maxReconnectDelay: Duration
    /// Asked before every reconnect attempt and before every REST attempt: while it says the
    /// network is down, nothing is attempted and no attempt is counted. The default polls the
    /// machine's interfaces every 2 s (loopback counts when the base URL is a loopback host).
    public var reachability: any Reachability
    /// Sends (stream) and requests (REST) that may wait while offline. Default 100; the next one is
    /// refused with `RealtimeError/Code/queueFull`.
    public var offlineQueueCapacity: Int
    /// Sends that may be pending while connected (waiting for the socket or their POST). Bounds
    /// memory when a producer outpaces the connection; the next one is refused with `queueFull`.
    /// Default 4,096.
    public var maxPendingSends: Int
    /// Every send goes out as a `POST`, even over a WebSocket stream: a send then completes only when
    /// the server answered 2xx, and a cut mid-burst re-sends without duplicates (see Sources/SpreadbotClient/SpreadbotClient.docc/SpreadbotGuide.md,
    /// "Delivery"). Default false (WebSocket frames, as the seed did).
    public var acknowledgedSends: Bool
    /// The WebSocket sends a ping this often when idle and ends the connection (then reconnects)
    /// when nothing answers: a silent half-open connection is found within three times this. nil
    /// disables it. Default 30 s.
    public var webSocketPingInterval: Duration?
    /// An event stream that carries nothing (no event, no comment) for this long is taken as lost
    /// and reconnected with its `Last-Event-ID`: an event stream has no ping of its own, so a
    /// connection that a NAT or a proxy forgot is found only this way. nil: never. Default 300 s,
    /// as EventSource's `idleTimeout`; a server that sends a comment more often than this (most
    /// send one every 15-30 s) is never taken for lost.
    public var eventStreamIdleTimeout: Duration?
    /// Limit for one REST request, for a send's POST and for opening each transport. Default 5 s.
    public var requestTimeout: Duration
    /// Extra headers on every request: the stream (WebSocket upgrade, event stream, polls), sends,
    /// REST calls. Never logged. `Authorization` is set from the tokens. Default none.
    public var headers: HTTPHeaders
    /// The `client` dimension of this client's metrics (Docs/Metrics.md). Default `default`.
    public var clientLabel: String
    /// Attempts per REST request (and per POST send) on network errors and 5xx. Default 3.
    public var requestAttempts: Int
    /// The delay after the first failed attempt; it doubles after each. Default 0.5 s.
    public var retryDelay: Duration
    /// Largest inbound message (WebSocket message, SSE event, poll body, REST body). Default 16 MiB.
    public var maxMessageSize: Int
    /// How many stream messages each ``Spreadbot/messages()`` iterator buffers before the stream
    /// stops reading from the socket (backpressure, not loss). Default 256.
    public var messageBufferCapacity: Int
    /// How TLS is checked: trust roots, a client certificate, pins (the system's trust roots by default).
    public var tls: TLSOptions
    /// The runtime whose event loops, HTTP clients, metrics factory and tracer the client uses.
    public var runtime: RealtimeRuntime

    /// Makes a configuration; every parameter is the property of the same name.
    public init(
        baseURL: String,
        authURL: String? = nil,
        accessToken: String? = nil,
        refreshToken: String? = nil,
        base64Credentials: String? = nil,
        log: Bool = false,
        runtime: RealtimeRuntime = .shared
    ) {
        self.baseURL = baseURL
        self.authURL = authURL
        self.accessToken = accessToken
        self.refreshToken = refreshToken
        self.base64Credentials = base64Credentials
        self.log = log
        self.transports = SpreadbotTransport.allCases
        self.pollInterval = .seconds(15)
        self.maxReconnectAttempts = 3
        self.reconnectDelay = .seconds(1)
        self.maxReconnectDelay = .seconds(10)
        let host = (try? Endpoint(baseURL, allowedSchemes: ["http", "https"]))?.host
        self.reachability = PollingReachability(acceptLoopback: PollingReachability.isLoopbackHost(host), runtime: runtime)
        self.offlineQueueCapacity = 100
        self.maxPendingSends = 4096
        self.acknowledgedSends = false
        self.webSocketPingInterval = .seconds(30)
        self.eventStreamIdleTimeout = .seconds(300)
        self.requestTimeout = .seconds(5)
        self.headers = [:]
        self.clientLabel = "default"
        self.requestAttempts = 3
        self.retryDelay = .milliseconds(500)
        self.maxMessageSize = 16 << 20
        self.messageBufferCapacity = 256
        self.tls = .default
        self.runtime = runtime
    }

    /// The seed's form: `"baseURL"`, `"authURL"`, `"accessToken"`, `"refreshToken"`,
    /// `"base64Credentials"` (strings) and `"log"` (bool). Unknown keys are ignored; a missing or
    /// non-string `baseURL` gives an empty one, which fails with `invalidURL` on first use.
    public init(dictionary: [String: Any], runtime: RealtimeRuntime = .shared) {
        self.init(
            baseURL: dictionary["baseURL"] as? String ?? "",
            authURL: dictionary["authURL"] as? String,
            accessToken: dictionary["accessToken"] as? String,
            refreshToken: dictionary["refreshToken"] as? String,
            base64Credentials: dictionary["base64Credentials"] as? String,
            log: dictionary["log"] as? Bool ?? false,
            runtime: runtime)
    }

    /// A readable summary, for logs and messages.
    public var description: String {
        "SpreadbotConfiguration(baseURL: \(Redaction.url(baseURL)), authURL: \(authURL.map(Redaction.url) ?? "nil"), tokens: <redacted>, transports: \(transports))"
    }

    /// `<baseURL>/<path>` with exactly one slash between them.
    func url(for path: String) -> String {
        var base = Substring(baseURL)
        while base.hasSuffix("/") { base = base.dropLast() }
        var tail = Substring(path)
        while tail.hasPrefix("/") { tail = tail.dropFirst() }
        return tail.isEmpty ? String(base) : "\(base)/\(tail)"
    }

    /// The WebSocket URL for `path`: the HTTP URL with `ws`/`wss`.
    func webSocketURL(for path: String) -> String {
        let http = url(for: path)
        if http.hasPrefix("https://") { return "wss://" + http.dropFirst("https://".count) }
        if http.hasPrefix("http://") { return "ws://" + http.dropFirst("http://".count) }
        return http
    }
}
