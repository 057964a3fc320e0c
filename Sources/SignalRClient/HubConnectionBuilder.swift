public import Foundation
internal import RealtimeCore
import Logging
internal import SignalRHub

/// Builds a ``HubConnection``: SwiftSignalRClient's `HubConnectionBuilder(url:)` and the official
/// client's `HubConnectionBuilder().withUrl(url:)`. A class, as in both: each `with...` changes
/// this builder and returns it.
public class HubConnectionBuilder {
    var url: String?
    var transports: HttpTransportType?
    var httpOptions = HttpConnectionOptions()
    var hubOptions = HubConnectionOptions()
    var delegate: (any HubConnectionDelegate)?
    var reconnectPolicy: (any ReconnectPolicy)?
    var retryPolicy: (any SignalRHub.RetryPolicy)?
    var moozzykLogger: (any Logger, LogLevel)?
    var logHandler: (any LogHandler)?
    var logLevel: LogLevel?
    var protocolName = "json"
    var serverTimeout: TimeInterval?
    var keepAliveInterval: TimeInterval?

    /// SwiftSignalRClient's entry point: the hub's URL.
    public init(url: URL) {
        self.url = url.absoluteString
    }

    /// The official client's entry point; give the URL with ``withUrl(url:)``.
    public init() {}

    // MARK: The official client's settings

    /// The hub's URL.
    public func withUrl(url: String) -> HubConnectionBuilder {
        self.url = url
        return self
    }

    /// The hub's URL and the transports allowed.
    public func withUrl(url: String, transport: HttpTransportType) -> HubConnectionBuilder {
        self.url = url
        self.transports = transport
        return self
    }

    /// The hub's URL and HTTP options (``HttpConnectionOptions/accessTokenFactory``,
    /// ``HttpConnectionOptions/transport``, headers, ``HttpConnectionOptions/skipNegotiation`` ...).
    public func withUrl(url: String, options: HttpConnectionOptions) -> HubConnectionBuilder {
        self.url = url
        self.httpOptions = options
        if let transport = options.transport { self.transports = transport }
        return self
    }

    /// Reconnects after 0, 2, 10 and 30 s, then stops.
    public func withAutomaticReconnect() -> HubConnectionBuilder {
        retryPolicy = SignalRHub.DefaultRetryPolicy()
        return self
    }

    /// Reconnects after each of `retryDelays` (seconds), then stops.
    public func withAutomaticReconnect(retryDelays: [TimeInterval]) -> HubConnectionBuilder {
        retryPolicy = SignalRHub.DefaultRetryPolicy(retryDelays: retryDelays)
        return self
    }

    /// ``withAutomaticReconnect(retryDelays:)`` without the label, as the official README writes it.
    public func withAutomaticReconnect(_ retryDelays: [TimeInterval]) -> HubConnectionBuilder {
        withAutomaticReconnect(retryDelays: retryDelays)
    }

    /// Reconnects as `retryPolicy` says.
    public func withAutomaticReconnect(retryPolicy: any RetryPolicy) -> HubConnectionBuilder {
        self.retryPolicy = RetryPolicyAdapter(policy: retryPolicy)
        return self
    }

    /// ``withAutomaticReconnect(retryPolicy:)`` without the label, as the official README writes it.
    public func withAutomaticReconnect(_ retryPolicy: any RetryPolicy) -> HubConnectionBuilder {
        withAutomaticReconnect(retryPolicy: retryPolicy)
    }

    /// The least level logged (with ``PrintLogger`` unless ``withLogHandler(logHandler:)`` gives a sink).
    public func withLogLevel(logLevel: LogLevel) -> HubConnectionBuilder {
        self.logLevel = logLevel
        return self
    }

    /// Where log entries go.
    public func withLogHandler(logHandler: any LogHandler) -> HubConnectionBuilder {
        self.logHandler = logHandler
        return self
    }

    /// JSON (the default) or MessagePack.
    public func withHubProtocol(hubProtocol: HubProtocolType) -> HubConnectionBuilder {
        protocolName = hubProtocol == .json ? "json" : "messagepack"
        return self
    }

    /// Seconds without a message from the server before the connection is lost (30).
    public func withServerTimeout(serverTimeout: TimeInterval) -> HubConnectionBuilder {
        self.serverTimeout = serverTimeout
        return self
    }

    /// Seconds between pings when nothing else was sent (15).
    public func withKeepAliveInterval(keepAliveInterval: TimeInterval) -> HubConnectionBuilder {
        self.keepAliveInterval = keepAliveInterval
        return self
    }

    // MARK: SwiftSignalRClient's settings

    /// The hub protocol: this package speaks JSON and MessagePack itself, and picks the one named by
    /// the protocol the factory makes ("json" or "messagepack").
    public func withHubProtocol(hubProtocolFactory: @escaping (any Logger) -> any HubProtocol) -> HubConnectionBuilder {
        protocolName = hubProtocolFactory(moozzykLogger?.0 ?? NullLogger()).name.lowercased()
        return self
    }

    /// JSON, the default.
    public func withJSONHubProtocol() -> HubConnectionBuilder {
        protocolName = "json"
        return self
    }

    /// Changes the HTTP options (repeated calls change the same options).
    public func withHttpConnectionOptions(configureHttpOptions: (_ httpConnectionOptions: HttpConnectionOptions) -> Void) -> HubConnectionBuilder {
        configureHttpOptions(httpOptions)
        return self
    }

    /// Changes the hub options: keep-alive and the callback queue.
    public func withHubConnectionOptions(configureHubConnectionOptions: (_ hubConnectionOptions: HubConnectionOptions) -> Void) -> HubConnectionBuilder {
        configureHubConnectionOptions(hubOptions)
        return self
    }

    /// Logs at `minLogLevel` and above with ``PrintLogger``.
    public func withLogging(minLogLevel: LogLevel) -> HubConnectionBuilder {
        moozzykLogger = (PrintLogger(), minLogLevel)
        return self
    }

    /// Gives every entry to `logger`.
    public func withLogging(logger: any Logger) -> HubConnectionBuilder {
        moozzykLogger = (logger, .debug)
        return self
    }

    /// Gives entries at `minLogLevel` and above to `logger`.
    public func withLogging(minLogLevel: LogLevel, logger: any Logger) -> HubConnectionBuilder {
        moozzykLogger = (logger, minLogLevel)
        return self
    }

    /// The lifecycle delegate; the connection holds it weakly.
    public func withHubConnectionDelegate(delegate: any HubConnectionDelegate) -> HubConnectionBuilder {
        self.delegate = delegate
        return self
    }

    /// Reconnects a lost connection, and retries a failing start, as `reconnectPolicy` says (by
    /// default after 0, 2, 10 and 30 s, then it gives up).
    public func withAutoReconnect(reconnectPolicy: any ReconnectPolicy = DefaultReconnectPolicy()) -> HubConnectionBuilder {
        self.reconnectPolicy = reconnectPolicy
        self.retryPolicy = ReconnectPolicyAdapter(policy: HandOff(reconnectPolicy))
        return self
    }

    /// The transports allowed (all by default).
    public func withPermittedTransportTypes(_ permittedTransportTypes: TransportType) -> HubConnectionBuilder {
        var transports: HttpTransportType = []
        if permittedTransportTypes.contains(.webSockets) { transports.insert(.webSockets) }
        if permittedTransportTypes.contains(.longPolling) { transports.insert(.longPolling) }
        self.transports = transports
        return self
    }

    /// Makes the connection (not started). Traps without a URL.
    public func build() -> HubConnection {
        let parts = parts()
        return HubConnection(parts: parts, callbackQueue: hubOptions.callbackQueue, reconnectPolicy: reconnectPolicy)
    }

    // MARK: Assembly

    struct Parts {
        let base: SignalRHub.HubConnection
        let observer: LifecycleForwarder
        let delegate: Locked<WeakDelegate>
        let reconnecting: ReconnectingHandlers
    }

    func parts() -> Parts {
        guard let url else { preconditionFailure("HubConnectionBuilder.build(): give the hub's URL with withUrl(url:)") }
        var options = SignalRHub.HubConnectionOptions(url: url)
        let http = httpOptions
        options.headers.merge(http.headers) { _, new in new }
        options.skipNegotiation = http.skipNegotiation
        if let transports {
            options.transports = SignalRHub.HttpTransportType(rawValue: transports.rawValue)
        }
        if http.skipNegotiation { options.transports = .webSockets }
        options.handshakeTimeout = .milliseconds(Int64(http.requestTimeout * 1000))
        if let timeout = http.timeout { options.negotiateTimeout = .milliseconds(Int64(timeout * 1000)) }
        if let size = http.maximumWebsocketMessageSize { options.maximumReceiveMessageSize = size }
        if let tls = http.tls { options.tls = tls }
        if let factory = http.accessTokenFactory {
            options.accessTokenProvider = factory
        } else {
            let provider = HandOff(http.accessTokenProvider)
            options.accessTokenProvider = { provider.value() }
        }
        let client = http.httpClientFactory(http)
        if !(client is DefaultHttpClient) {
            let box = HandOff(client)
            options.negotiateRequest = { url in try await Self.post(url, with: box.value) }
        } else if let client = http.httpClient {
            options.negotiateRequest = { url in try await Self.post(url, with: client) }
        }
        options.hubProtocol = protocolName == "messagepack" ? .messagePack : .json
        if let interval = hubOptions.keepAliveInterval {
            options.keepAliveInterval = .milliseconds(Int64(interval * 1000))
        } else {
            options.keepAliveInterval = .seconds(Int64(Int32.max))
        }
        if let keepAliveInterval { options.keepAliveInterval = .milliseconds(Int64(keepAliveInterval * 1000)) }
        if let serverTimeout { options.serverTimeout = .milliseconds(Int64(serverTimeout * 1000)) }
        options.retryPolicy = retryPolicy
        if let logger = makeLogger() {
            var runtime = options.runtime
            runtime.logger = logger
            options.runtime = runtime
        }
        let observer = LifecycleForwarder()
        options.lifecycleObserver = observer
        let reconnecting = ReconnectingHandlers()
        // The official client awaits its onReconnecting handlers before every attempt.
        options.beforeReconnectAttempt = { error in await reconnecting.run(HubConnection.dotnetError(error)) }
        let delegate = Locked(WeakDelegate(value: self.delegate))
        let base = SignalRHub.HubConnection(options: options)
        base.onReconnecting { error in await reconnecting.run(HubConnection.dotnetError(error)) }
        return Parts(base: base, observer: observer, delegate: delegate, reconnecting: reconnecting)
    }

    private func makeLogger() -> Logging.Logger? {
        if let (logger, level) = moozzykLogger { return ForwardingLogHandler.logger(minimum: level, logger: logger) }
        if let logHandler { return ForwardingLogHandler.logger(minimum: logLevel ?? .info, handler: logHandler) }
        if let logLevel { return ForwardingLogHandler.logger(minimum: logLevel, logger: PrintLogger()) }
        if let handler = httpOptions.logHandler { return ForwardingLogHandler.logger(minimum: httpOptions.logLevel, handler: handler) }
        return nil
    }

    /// POSTs the negotiate request through the app's SwiftSignalRClient client (the first answer
    /// wins if it calls back twice).
    static func post(_ url: URL, with client: any HttpClientProtocol) async throws -> (status: Int, body: [UInt8]) {
        let reply = Locked<CheckedContinuation<HttpResponse, any Error>?>(nil)
        let response = try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<HttpResponse, any Error>) in
            reply.withLock { $0 = continuation }
            client.post(url: url, body: nil) { response, error in
                guard let waiting = reply.withLock({ state -> CheckedContinuation<HttpResponse, any Error>? in
                    defer { state = nil }
                    return state
                }) else { return }
                if let response, error == nil {
                    waiting.resume(returning: response)
                } else {
                    waiting.resume(throwing: error ?? SignalRError.invalidNegotiationResponse(message: "the HTTP client answered neither a response nor an error"))
                }
            }
        }
        return (response.statusCode, Array(response.contents ?? Data()))
    }

    /// POSTs the negotiate request through the app's official-client `HttpClient`.
    static func post(_ url: URL, with client: any HttpClient) async throws -> (status: Int, body: [UInt8]) {
        let (body, response) = try await client.send(request: HttpRequest(method: .POST, url: url.absoluteString))
        switch body {
        case .string(let text): return (response.statusCode, Array(text.utf8))
        case .data(let data): return (response.statusCode, Array(data))
        }
    }
}

/// SwiftSignalRClient's reconnect policy as this package's.
struct ReconnectPolicyAdapter: SignalRHub.RetryPolicy {
    let policy: HandOff<any ReconnectPolicy>

    func nextRetryInterval(retryContext: SignalRHub.RetryContext) -> TimeInterval? {
        let context = RetryContext(
            failedAttemptsCount: retryContext.retryCount, reconnectStartTime: Date(timeIntervalSinceNow: -retryContext.elapsed),
            error: retryContext.retryReason ?? SignalRError.connectionAborted)
        return policy.value.nextAttemptInterval(retryContext: context).seconds
    }
}

/// The official client's retry policy as this package's.
struct RetryPolicyAdapter: SignalRHub.RetryPolicy {
    let policy: any RetryPolicy

    func nextRetryInterval(retryContext: SignalRHub.RetryContext) -> TimeInterval? {
        policy.nextRetryInterval(retryContext: RetryContext(
            failedAttemptsCount: retryContext.retryCount, reconnectStartTime: Date(timeIntervalSinceNow: -retryContext.elapsed),
            error: retryContext.retryReason ?? SignalRError.connectionAborted))
    }
}
