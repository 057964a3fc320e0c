public import Foundation
import NIOHTTP1
public import RealtimeCore

/// Everything a ``HubConnection`` is configured with. ``HubConnectionBuilder`` fills it the way the
/// official Swift client's builder does; code may also set it directly.
public struct HubConnectionOptions: Sendable {
    /// The hub's URL (`http(s)://host/hub`); its query is kept on every request.
    public var url: String
    /// The transports the client may use. WebSockets is the one implemented in this version; see
    /// Sources/SignalRHub/SignalRHub.docc/SignalRGuide.md, "Status".
    public var transports: HttpTransportType = .all
    /// The hub protocol: JSON (default) or MessagePack.
    public var hubProtocol: HubProtocolType = .json
    /// Send a Ping when nothing was sent for this long (default 15 s). Not on long polling, whose
    /// polls keep the connection alive.
    public var keepAliveInterval: Duration = .seconds(15)
    /// The connection is lost when nothing arrives for this long (default 30 s). Not on long
    /// polling, where the server sends no Pings (a poll waits up to 100 s for its answer instead).
    public var serverTimeout: Duration = .seconds(30)
    /// The server must answer the handshake within this time (default 15 s).
    public var handshakeTimeout: Duration = .seconds(15)
    /// The negotiate request must be answered within this time (default 30 s).
    public var negotiateTimeout: Duration = .seconds(30)
    /// Connect straight to the WebSocket without negotiating (only with `transports == .webSockets`).
    public var skipNegotiation = false
    /// Headers sent on negotiate and on the transport's requests.
    public var headers: [String: String] = [:]
    /// Asked for a bearer token before every connect and reconnect; nil or an empty token sends none.
    public var accessTokenProvider: (@Sendable () async throws -> String?)?
    /// Nil: no automatic reconnect (the default, as in the reference clients).
    public var retryPolicy: (any RetryPolicy)?
    /// Ask the server for stateful reconnect (WebSockets only): a lost socket is replaced with the
    /// same connection, unacknowledged messages are replayed in both directions and duplicates
    /// dropped, so pending calls survive the drop. Used only when the server agrees in negotiate.
    public var statefulReconnect = false
    /// Bytes of unacknowledged messages kept for replay (default 100,000, as the reference
    /// clients); a send past it waits for the server's acknowledgements.
    public var statefulReconnectBufferSize = 100_000
    /// How TLS is checked: trust roots, a client certificate, pins (the system's trust roots by default).
    public var tls: TLSOptions = .default
    /// Cookies kept between requests (negotiate sets them, the transport sends them back), for
    /// sticky sessions; nil: none.
    public var cookies: CookieStore?
    /// The largest message accepted from the server (default 32 MiB); a larger one ends the
    /// connection with `messageTooLarge`.
    public var maximumReceiveMessageSize = 32 << 20
    /// Server invocations waiting for their handlers; when full, reading from the server waits.
    public var handlerQueueSize = 1_024
    /// Items a server-to-client stream holds for a slow consumer; when full, reading waits.
    public var streamBufferSize = 256
    /// The runtime whose event loops, HTTP clients, metrics factory and tracer the client uses. A
    /// connection keeps to one of its event loops (``HubConnection/eventLoop``): its own `options`
    /// hold this runtime with that loop as the whole group.
    public var runtime: RealtimeRuntime = .shared
    /// The `client` dimension of this connection's metrics (Docs/Metrics.md). Default `default`.
    public var clientLabel = "default"
    /// Told about opens, failed starts, closes and reconnects (SignalRClient's delegate of the
    /// older client sits here).
    package var lifecycleObserver: (any HubLifecycleObserver)?
    /// When set, negotiate requests go through it (POST of the negotiate URL, the status and body as
    /// it answers them): the older client's `httpClientFactory` (SignalRClient).
    package var negotiateRequest: (@Sendable (URL) async throws -> (status: Int, body: [UInt8]))?
    /// When set, awaited before each reconnect attempt after the first of a reconnect, with the
    /// previous attempt's error: the official client's `onReconnecting` runs before every attempt
    /// (SignalRClient).
    package var beforeReconnectAttempt: (@Sendable (RealtimeError) async -> Void)?

    /// Makes options for the hub at `url` with every default.
    public init(url: String) {
        self.url = url
    }

    var httpHeaders: HTTPHeaders {
        HTTPHeaders(headers.sorted { $0.key < $1.key }.map { ($0.key, $0.value) })
    }
}

/// When to try reconnecting after a lost connection (the official client's protocol).
public protocol RetryPolicy: Sendable {
    /// The delay before the next attempt, nil to stop reconnecting.
    func nextRetryInterval(retryContext: RetryContext) -> TimeInterval?
}

/// What a ``RetryPolicy`` is told.
public struct RetryContext: Sendable {
    /// Attempts made so far in this reconnect (0 before the first).
    public let retryCount: Int
    /// Time since the connection was lost.
    public let elapsed: TimeInterval
    /// Why the last attempt failed, or why the connection was lost.
    public let retryReason: (any Error)?
}

/// A fixed list of delays; stops when the list is used up.
public struct DefaultRetryPolicy: RetryPolicy {
    /// The delays, in seconds, before each reconnect attempt.
    public let retryDelays: [TimeInterval]

    /// 0, 2, 10 and 30 seconds, as the reference clients.
    public init(retryDelays: [TimeInterval] = [0, 2, 10, 30]) {
        self.retryDelays = retryDelays
    }

    /// The delay before the next attempt, or nil once the list is used up.
    public func nextRetryInterval(retryContext: RetryContext) -> TimeInterval? {
        retryContext.retryCount < retryDelays.count ? retryDelays[retryContext.retryCount] : nil
    }
}

/// Log levels of the official Swift client's builder, mapped onto swift-log.
public enum LogLevel: Int, Sendable {
    /// Everything, for debugging.
    case debug = 0
    /// Connection events.
    case information = 1
    /// What an app should look at.
    case warning = 2
    /// Failures only.
    case error = 3
}

/// Lifecycle notifications for a compatibility layer; called synchronously, in order.
package protocol HubLifecycleObserver: Sendable {
    func didOpen(_ connection: HubConnection)
    func didFailToOpen(_ error: any Error)
    func didClose(_ error: (any Error)?)
    func willReconnect(_ error: any Error)
    func didReconnect()
}
