public import Foundation
public import RealtimeCore

/// Builds a ``HubConnection`` the way the official Swift client (dotnet/signalr-client-swift)
/// does, so its samples compile with only the import changed.
///
/// A value: every `with…` method returns a changed copy, so chain the calls (an unused result is a
/// warning, not a silently ignored option).
///
/// ```swift
/// let connection = HubConnectionBuilder()
///     .withUrl(url: "https://example.com/chat")
///     .withAutomaticReconnect()
///     .build()
/// ```
public struct HubConnectionBuilder: Sendable {
    private var options = HubConnectionOptions(url: "")
    private var logLevel: LogLevel?

    /// A builder with every option at its default; set the URL with ``withUrl(url:)``.
    public init() {}

    /// The hub's URL (`http(s)://host/hub`).
    public func withUrl(url: String) -> HubConnectionBuilder {
        changing { $0.options.url = url }
    }

    /// The hub's URL and the transports the client may use.
    public func withUrl(url: String, transport: HttpTransportType) -> HubConnectionBuilder {
        changing {
            $0.options.url = url
            $0.options.transports = transport
        }
    }

    /// Takes every other option from `options` (its URL is replaced by `url`).
    public func withUrl(url: String, options: HubConnectionOptions) -> HubConnectionBuilder {
        changing {
            $0.options = options
            $0.options.url = url
        }
    }

    /// Reconnects after 0, 2, 10 and 30 seconds, then gives up.
    public func withAutomaticReconnect() -> HubConnectionBuilder {
        changing { $0.options.retryPolicy = DefaultRetryPolicy() }
    }

    /// Reconnects after each of `retryDelays` (seconds), then gives up.
    public func withAutomaticReconnect(_ retryDelays: [TimeInterval]) -> HubConnectionBuilder {
        changing { $0.options.retryPolicy = DefaultRetryPolicy(retryDelays: retryDelays) }
    }

    /// ``withAutomaticReconnect(_:)-([TimeInterval])`` with the official client's label.
    public func withAutomaticReconnect(retryDelays: [TimeInterval]) -> HubConnectionBuilder {
        withAutomaticReconnect(retryDelays)
    }

    /// Reconnects as `retryPolicy` decides.
    public func withAutomaticReconnect(_ retryPolicy: some RetryPolicy) -> HubConnectionBuilder {
        changing { $0.options.retryPolicy = retryPolicy }
    }

    /// ``withAutomaticReconnect(_:)-(RetryPolicy)`` with the official client's label.
    public func withAutomaticReconnect(retryPolicy: some RetryPolicy) -> HubConnectionBuilder {
        withAutomaticReconnect(retryPolicy)
    }

    /// The least severe level the connection logs at (to the runtime's logger).
    public func withLogLevel(logLevel: LogLevel) -> HubConnectionBuilder {
        changing { $0.logLevel = logLevel }
    }

    /// Send a Ping when nothing was sent for this many seconds.
    public func withKeepAliveInterval(_ interval: TimeInterval) -> HubConnectionBuilder {
        changing { $0.options.keepAliveInterval = .milliseconds(Int64((interval * 1000).rounded())) }
    }

    /// ``withKeepAliveInterval(_:)`` with the official client's label.
    public func withKeepAliveInterval(keepAliveInterval: TimeInterval) -> HubConnectionBuilder {
        withKeepAliveInterval(keepAliveInterval)
    }

    /// The connection is lost when nothing arrives for this many seconds.
    public func withServerTimeout(_ timeout: TimeInterval) -> HubConnectionBuilder {
        changing { $0.options.serverTimeout = .milliseconds(Int64((timeout * 1000).rounded())) }
    }

    /// ``withServerTimeout(_:)`` with the official client's label.
    public func withServerTimeout(serverTimeout: TimeInterval) -> HubConnectionBuilder {
        withServerTimeout(serverTimeout)
    }

    /// JSON (the default) or MessagePack.
    public func withHubProtocol(hubProtocol: HubProtocolType) -> HubConnectionBuilder {
        changing { $0.options.hubProtocol = hubProtocol }
    }

    /// The runtime (event loops, HTTP client, logger, clock) to run on; a ManualClock in tests.
    public func withRuntime(_ runtime: RealtimeRuntime) -> HubConnectionBuilder {
        changing { $0.options.runtime = runtime }
    }

    /// Changes any option the builder has no method for.
    public func withOptions(_ configure: (inout HubConnectionOptions) -> Void) -> HubConnectionBuilder {
        changing { configure(&$0.options) }
    }

    /// The connection. The URL must have been set with `withUrl`.
    public func build() -> HubConnection {
        precondition(!options.url.isEmpty, "the hub URL must be set with withUrl(url:) before build()")
        return HubConnection(options: options, logLevel: logLevel)
    }

    private func changing(_ change: (inout HubConnectionBuilder) -> Void) -> HubConnectionBuilder {
        var copy = self
        change(&copy)
        return copy
    }
}
