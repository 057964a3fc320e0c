public import Foundation
public import RealtimeCore

/// Builds a ``HubConnection`` the way the official Swift client (dotnet/signalr-client-swift)
/// does, so its samples compile with only the import changed. Both the labelled forms of that
/// client and the unlabelled forms of its documentation are accepted.
// @unchecked Sendable: a builder is configured by one caller, then `build()` copies its value-type
// options into the connection; it holds no state that outlives that.
public final class HubConnectionBuilder: @unchecked Sendable {
    private var options = HubConnectionOptions(url: "")
    private var logLevel: LogLevel?

    public init() {}

    @discardableResult
    public func withUrl(url: String) -> HubConnectionBuilder {
        options.url = url
        return self
    }

    @discardableResult
    public func withUrl(url: String, transport: HttpTransportType) -> HubConnectionBuilder {
        options.url = url
        options.transports = transport
        return self
    }

    /// Takes every other option from `options` (its URL is replaced by `url`).
    @discardableResult
    public func withUrl(url: String, options: HubConnectionOptions) -> HubConnectionBuilder {
        self.options = options
        self.options.url = url
        return self
    }

    /// Reconnects after 0, 2, 10 and 30 seconds, then gives up.
    @discardableResult
    public func withAutomaticReconnect() -> HubConnectionBuilder {
        options.retryPolicy = DefaultRetryPolicy()
        return self
    }

    @discardableResult
    public func withAutomaticReconnect(_ retryDelays: [TimeInterval]) -> HubConnectionBuilder {
        options.retryPolicy = DefaultRetryPolicy(retryDelays: retryDelays)
        return self
    }

    @discardableResult
    public func withAutomaticReconnect(retryDelays: [TimeInterval]) -> HubConnectionBuilder {
        withAutomaticReconnect(retryDelays)
    }

    @discardableResult
    public func withAutomaticReconnect(_ retryPolicy: some RetryPolicy) -> HubConnectionBuilder {
        options.retryPolicy = retryPolicy
        return self
    }

    @discardableResult
    public func withAutomaticReconnect(retryPolicy: some RetryPolicy) -> HubConnectionBuilder {
        withAutomaticReconnect(retryPolicy)
    }

    @discardableResult
    public func withLogLevel(logLevel: LogLevel) -> HubConnectionBuilder {
        self.logLevel = logLevel
        return self
    }

    @discardableResult
    public func withKeepAliveInterval(_ interval: TimeInterval) -> HubConnectionBuilder {
        options.keepAliveInterval = .milliseconds(Int64((interval * 1000).rounded()))
        return self
    }

    @discardableResult
    public func withKeepAliveInterval(keepAliveInterval: TimeInterval) -> HubConnectionBuilder {
        withKeepAliveInterval(keepAliveInterval)
    }

    @discardableResult
    public func withServerTimeout(_ timeout: TimeInterval) -> HubConnectionBuilder {
        options.serverTimeout = .milliseconds(Int64((timeout * 1000).rounded()))
        return self
    }

    @discardableResult
    public func withServerTimeout(serverTimeout: TimeInterval) -> HubConnectionBuilder {
        withServerTimeout(serverTimeout)
    }

    @discardableResult
    public func withHubProtocol(hubProtocol: HubProtocolType) -> HubConnectionBuilder {
        options.hubProtocol = hubProtocol.kind
        return self
    }

    @discardableResult
    public func withHubProtocol(_ hubProtocol: HubProtocolKind) -> HubConnectionBuilder {
        options.hubProtocol = hubProtocol
        return self
    }

    /// The runtime (event loops, HTTP client, logger, clock) to run on; a ManualClock in tests.
    @discardableResult
    public func withRuntime(_ runtime: RealtimeRuntime) -> HubConnectionBuilder {
        options.runtime = runtime
        return self
    }

    /// Changes any option the builder has no method for.
    @discardableResult
    public func withOptions(_ configure: (inout HubConnectionOptions) -> Void) -> HubConnectionBuilder {
        configure(&options)
        return self
    }

    /// The connection. The URL must have been set with `withUrl`.
    public func build() -> HubConnection {
        precondition(!options.url.isEmpty, "the hub URL must be set with withUrl(url:) before build()")
        return HubConnection(options: options, logLevel: logLevel)
    }
}
