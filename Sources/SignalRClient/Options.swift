public import Foundation
#if canImport(FoundationNetworking)
public import FoundationNetworking
#endif
public import RealtimeCore

/// The TLS settings of ``HttpConnectionOptions/tls``: trust roots, pinned public keys, a client
/// certificate, the server name (RealtimeCore's `TLSOptions`, named here so that code importing
/// only this module can make one).
public typealias TLSOptions = RealtimeCore.TLSOptions

/// The HTTP options: SwiftSignalRClient's class, set in
/// ``HubConnectionBuilder/withHttpConnectionOptions(configureHttpOptions:)``, which also carries
/// the official client's members (``accessTokenFactory``, ``transport``, ``timeout`` ...) for
/// ``HubConnectionBuilder/withUrl(url:options:)``. A class: the official client's struct of this
/// name is met by the same spellings (`var options = HttpConnectionOptions(); options.x = ...`),
/// but a copy shares its members with the original.
public class HttpConnectionOptions {
    /// Headers sent on negotiate and on the transport's requests.
    public var headers: [String: String] = [:]
    /// Asked before every connect and reconnect; a token goes in `Authorization: Bearer`.
    public var accessTokenProvider: () -> String? = { nil }
    /// Makes the HTTP client that sends the negotiate request. The default answers nil: this
    /// package's own HTTP stack. The transports always use this package's.
    public var httpClientFactory: (_ options: HttpConnectionOptions) -> any HttpClientProtocol = { _ in DefaultHttpClient() }
    /// Connect straight to the WebSocket without negotiating.
    public var skipNegotiation = false
    /// Seconds to wait for negotiate and for the server's handshake.
    public var requestTimeout: TimeInterval = 120
    /// The largest message the WebSocket accepts (nil: 32 MiB, this package's default).
    public var maximumWebsocketMessageSize: Int?
    /// The queue of a standalone ``HttpConnection``'s delegate calls (a private serial queue). The
    /// hub's callbacks use ``HubConnectionOptions/callbackQueue``.
    public var callbackQueue = DispatchQueue(label: "SignalR.connection.callbackQueue")

    /// The TLS settings of negotiate and the transports: trust roots, pinned keys, a client
    /// certificate (nil: the system's trust roots). This package's own member, in place of
    /// `authenticationChallengeHandler`.
    public var tls: TLSOptions?

    /// Not carried: TLS is this package's own (trust roots, pinning).
    @available(*, unavailable, message: "there is no URLSession: set trust roots, pinning or a client certificate with tls = TLSOptions(...)")
    public var authenticationChallengeHandler: ((_ session: URLSession, _ challenge: URLAuthenticationChallenge, _ completionHandler: @escaping (URLSession.AuthChallengeDisposition, URLCredential?) -> Void) -> Void)? {
        get { nil }
        set {}
    }

    /// The official client's log sink for the HTTP layer (this package has one log for both).
    public var logHandler: (any LogHandler)?
    /// The official client's level for the HTTP layer.
    public var logLevel: LogLevel = .information
    /// The official client's token source: asked before every connect and reconnect. When set it
    /// wins over ``accessTokenProvider``.
    public var accessTokenFactory: (@Sendable () async throws -> String?)?
    /// The official client's HTTP client, used for the negotiate request.
    public var httpClient: (any HttpClient)?
    /// The official client's allowed transports (nil: all).
    public var transport: HttpTransportType?
    /// The official client's request timeout in seconds (nil: 100), used for negotiate.
    public var timeout: TimeInterval?
    /// The official client's switch for logging message contents (this package never logs them).
    public var logMessageContent: Bool?

    /// Makes options with every default.
    public init() {}

    var usesDefaultHttpClient = true
}

/// Hub-level options of SwiftSignalRClient, set in
/// ``HubConnectionBuilder/withHubConnectionOptions(configureHubConnectionOptions:)``.
public class HubConnectionOptions {
    /// Seconds between pings when nothing else was sent; nil turns pings off.
    public var keepAliveInterval: Double? = 15
    /// The queue of every callback the app gets: delegate calls, `on` handlers, `invoke`, `send`
    /// and `stream` completions and stream items. `.main` by default.
    public var callbackQueue: DispatchQueue = .main

    /// Makes options with every default.
    public init() {}
}

/// SwiftSignalRClient's transports.
public struct TransportType: OptionSet, Sendable {
    /// The raw bits.
    public let rawValue: Int
    /// Makes a set from its bits.
    public init(rawValue: Int) { self.rawValue = rawValue }
    /// Long polling.
    public static let longPolling = TransportType(rawValue: 1)
    /// WebSockets.
    public static let webSockets = TransportType(rawValue: 4)
    /// WebSockets and long polling.
    public static let all: TransportType = [.longPolling, .webSockets]
}

/// The official client's transports.
public struct HttpTransportType: OptionSet, Sendable, Hashable {
    /// The raw bits.
    public let rawValue: Int
    /// Makes a set from its bits.
    public init(rawValue: Int) { self.rawValue = rawValue }
    /// None.
    public static let none = HttpTransportType([])
    /// WebSockets.
    public static let webSockets = HttpTransportType(rawValue: 1)
    /// Server-Sent Events.
    public static let serverSentEvents = HttpTransportType(rawValue: 2)
    /// Long polling.
    public static let longPolling = HttpTransportType(rawValue: 4)
}

/// A transport's data format (SwiftSignalRClient's raw values).
public enum TransferFormat: String, Sendable {
    /// UTF-8 text.
    case text = "Text"
    /// Bytes.
    case binary = "Binary"
}

/// The official client's hub protocols.
public enum HubProtocolType: Sendable {
    /// JSON, the default.
    case json
    /// MessagePack.
    case messagePack
}

// @unchecked Sendable: every member is a `let`; `error` is the connection's own error value
// (RealtimeError, SignalRError), which is Sendable.
/// Given to a ``ReconnectPolicy`` or ``RetryPolicy`` before each reconnect attempt. It carries
/// both libraries' members.
public struct RetryContext: @unchecked Sendable {
    /// Attempts of this reconnect that failed (0 before the first).
    public let failedAttemptsCount: Int
    /// When this reconnect began.
    public let reconnectStartTime: Date
    /// The error that lost the connection, then the last attempt's.
    public let error: any Error
    /// The official client's name for ``failedAttemptsCount``.
    public var retryCount: Int { failedAttemptsCount }
    /// Seconds spent reconnecting.
    public var elapsed: TimeInterval { Date().timeIntervalSince(reconnectStartTime) }
    /// The official client's name for ``error``.
    public var retryReason: (any Error)? { error }

    init(failedAttemptsCount: Int, reconnectStartTime: Date, error: any Error) {
        self.failedAttemptsCount = failedAttemptsCount
        self.reconnectStartTime = reconnectStartTime
        self.error = error
    }
}

/// SwiftSignalRClient's reconnect rule.
public protocol ReconnectPolicy {
    /// How long to wait before the next attempt; `.never` stops reconnecting.
    func nextAttemptInterval(retryContext: RetryContext) -> DispatchTimeInterval
}

/// Waits the listed intervals one after another, then stops.
public class DefaultReconnectPolicy: ReconnectPolicy {
    private let retryIntervals: [DispatchTimeInterval]

    /// Makes a policy; the default waits 0, 2, 10 and 30 s.
    public init(retryIntervals: [DispatchTimeInterval] = [.milliseconds(0), .seconds(2), .seconds(10), .seconds(30)]) {
        self.retryIntervals = retryIntervals
    }

    /// The interval for this attempt, `.never` after the last.
    public func nextAttemptInterval(retryContext: RetryContext) -> DispatchTimeInterval {
        retryContext.failedAttemptsCount < retryIntervals.count ? retryIntervals[retryContext.failedAttemptsCount] : .never
    }
}

/// Waits the listed intervals, then the last one forever.
public class InfiniteReconnectPolicy: ReconnectPolicy {
    private let retryIntervals: [DispatchTimeInterval]

    /// Makes a policy; the default waits 0, 2, 10, then 15 s forever.
    public init(retryIntervals: [DispatchTimeInterval] = [.milliseconds(0), .seconds(2), .seconds(10), .seconds(15)]) {
        self.retryIntervals = retryIntervals
    }

    /// The interval for this attempt; the last one repeats.
    public func nextAttemptInterval(retryContext: RetryContext) -> DispatchTimeInterval {
        guard let last = retryIntervals.last else { return .never }
        return retryContext.failedAttemptsCount < retryIntervals.count ? retryIntervals[retryContext.failedAttemptsCount] : last
    }
}

/// The official client's reconnect rule.
public protocol RetryPolicy: Sendable {
    /// Seconds to wait before the next attempt; nil stops reconnecting.
    func nextRetryInterval(retryContext: RetryContext) -> TimeInterval?
}

extension DispatchTimeInterval {
    /// Seconds, nil for `.never`.
    var seconds: TimeInterval? {
        switch self {
        case .seconds(let value): TimeInterval(value)
        case .milliseconds(let value): TimeInterval(value) / 1_000
        case .microseconds(let value): TimeInterval(value) / 1_000_000
        case .nanoseconds(let value): TimeInterval(value) / 1_000_000_000
        case .never: nil
        @unknown default: nil
        }
    }
}

/// The official client's stateful-reconnect options (its builder does not offer them in this
/// version; neither does this module's).
public struct StatefulReconnectOptions: Sendable {
    /// Bytes kept for replay.
    public var bufferSize: Int?
}

/// SwiftSignalRClient's HTTP client, used here for the negotiate request.
public protocol HttpClientProtocol {
    /// Sends a GET.
    func get(url: URL, completionHandler: @escaping (HttpResponse?, (any Error)?) -> Void)
    /// Sends a POST with `body`.
    func post(url: URL, body: Data?, completionHandler: @escaping (HttpResponse?, (any Error)?) -> Void)
    /// Sends a DELETE.
    func delete(url: URL, completionHandler: @escaping (HttpResponse?, (any Error)?) -> Void)
}

/// Marks the default factory's client: negotiate then goes through this package's own HTTP stack.
final class DefaultHttpClient: HttpClientProtocol {
    func get(url: URL, completionHandler: @escaping (HttpResponse?, (any Error)?) -> Void) {
        completionHandler(nil, SignalRError.invalidOperation(message: "the default HTTP client is this package's own stack"))
    }
    func post(url: URL, body: Data?, completionHandler: @escaping (HttpResponse?, (any Error)?) -> Void) {
        completionHandler(nil, SignalRError.invalidOperation(message: "the default HTTP client is this package's own stack"))
    }
    func delete(url: URL, completionHandler: @escaping (HttpResponse?, (any Error)?) -> Void) {
        completionHandler(nil, SignalRError.invalidOperation(message: "the default HTTP client is this package's own stack"))
    }
}

/// An HTTP response: SwiftSignalRClient's class, which also serves the official client's
/// `HttpResponse` (its `statusCode`).
public final class HttpResponse: Sendable {
    /// The HTTP status.
    public let statusCode: Int
    /// The body.
    public let contents: Data?

    /// Makes a response.
    public init(statusCode: Int, contents: Data?) {
        self.statusCode = statusCode
        self.contents = contents
    }
}

/// The official client's HTTP methods.
public enum HttpMethod: String, Sendable {
    case GET, PUT, PATCH, POST, DELETE
}

/// The official client's body type.
public enum StringOrData: Sendable, Equatable {
    /// Text.
    case string(String)
    /// Bytes.
    case data(Data)
}

/// The official client's HTTP request.
public struct HttpRequest: Sendable {
    /// The method.
    public var method: HttpMethod
    /// The URL.
    public var url: String
    /// The body.
    public var content: StringOrData?
    /// The expected body format.
    public var responseType: TransferFormat?
    /// The headers.
    public var headers: [String: String]
    /// Seconds to wait.
    public var timeout: TimeInterval

    /// Makes a request.
    public init(method: HttpMethod, url: String, content: StringOrData? = nil, responseType: TransferFormat? = nil, headers: [String: String]? = nil, timeout: TimeInterval? = nil) {
        self.method = method
        self.url = url
        self.content = content
        self.responseType = responseType
        self.headers = headers ?? [:]
        self.timeout = timeout ?? 100
    }
}

/// The official client's HTTP client, used here for the negotiate request.
public protocol HttpClient: Sendable {
    /// Sends `request`; a status outside 200...299 is not an error.
    func send(request: HttpRequest) async throws -> (StringOrData, HttpResponse)
}
