import CoreMetrics
import NIOConcurrencyHelpers

/// The metrics every client reports (swift-metrics), with the dimensions `protocol` (`sse`,
/// `socketio`, `signalr`, `spreadbot`) and `client` (the client's label, `default` unless set).
/// Docs/Metrics.md lists them with their units.
///
/// Made with the runtime's ``RealtimeRuntime/metricsFactory`` (the process's `MetricsSystem.factory`
/// when none is set); recording is a counter increment, no allocation. Handles belong to a series,
/// not to a connection: every client of one protocol and label on one factory shares one instance
/// (``shared(protocol:client:runtime:)``), so a connection holds none of its own.
package final class ClientMetrics: Sendable {
    package static let connectionsOpenLabel = "realtime_connections_open"
    package static let connectionAttemptsLabel = "realtime_connection_attempts_total"
    package static let connectionFailuresLabel = "realtime_connection_failures_total"
    package static let reconnectsLabel = "realtime_reconnects_total"
    package static let messagesReceivedLabel = "realtime_messages_received_total"
    package static let messagesSentLabel = "realtime_messages_sent_total"
    package static let bytesReceivedLabel = "realtime_bytes_received_total"
    package static let bytesSentLabel = "realtime_bytes_sent_total"
    package static let sendQueueDepthLabel = "realtime_send_queue_depth"
    package static let messagesDroppedLabel = "realtime_messages_dropped_total"
    package static let callDurationLabel = "realtime_call_duration_seconds"

    private let dimensions: [(String, String)]
    private let factory: any MetricsFactory
    private let connectionsOpen: Meter
    private let connectionAttempts: Counter
    private let reconnects: Counter
    private let messagesReceived: Counter
    private let messagesSent: Counter
    private let bytesReceived: Counter
    private let bytesSent: Counter
    private let sendQueueDepth: Meter
    private let callDuration: Timer
    /// Failure and drop counters by code / reason, made on first use.
    private let byCode = NIOLockedValueBox<[String: Counter]>([:])
    private let byReason = NIOLockedValueBox<[String: Counter]>([:])

    /// The instance for clients of `name` labelled `client` on the runtime's factory: made once and
    /// shared while any client holds it. A factory that is not a class (no identity to key it by)
    /// gets an instance per call.
    package static func shared(protocol name: String, client: String, runtime: RealtimeRuntime) -> ClientMetrics {
        let factory = runtime.metricsFactory ?? MetricsSystem.factory
        guard type(of: factory) is AnyClass else { return ClientMetrics(protocol: name, client: client, factory: factory) }
        let key = SharedKey(protocolName: name, client: client, factory: ObjectIdentifier(factory as AnyObject))
        return sharedInstances.withLockedValue { instances in
            if let existing = instances[key]?.metrics { return existing }
            // Entries whose clients are all gone are dropped as the table grows.
            if instances.count >= 32 { instances = instances.filter { $0.value.metrics != nil } }
            let made = ClientMetrics(protocol: name, client: client, factory: factory)
            instances[key] = WeakMetrics(metrics: made)
            return made
        }
    }

    private struct SharedKey: Hashable {
        var protocolName: String
        var client: String
        /// Valid while the instance lives: it holds its factory.
        var factory: ObjectIdentifier
    }

    private struct WeakMetrics {
        weak var metrics: ClientMetrics?
    }

    private static let sharedInstances = NIOLockedValueBox<[SharedKey: WeakMetrics]>([:])

    package convenience init(protocol name: String, client: String, runtime: RealtimeRuntime) {
        self.init(protocol: name, client: client, factory: runtime.metricsFactory ?? MetricsSystem.factory)
    }

    private init(protocol name: String, client: String, factory: any MetricsFactory) {
        self.factory = factory
        let dimensions = [("protocol", name), ("client", client)]
        self.dimensions = dimensions
        connectionsOpen = Meter(label: Self.connectionsOpenLabel, dimensions: dimensions, factory: factory)
        connectionAttempts = Counter(label: Self.connectionAttemptsLabel, dimensions: dimensions, factory: factory)
        reconnects = Counter(label: Self.reconnectsLabel, dimensions: dimensions, factory: factory)
        messagesReceived = Counter(label: Self.messagesReceivedLabel, dimensions: dimensions, factory: factory)
        messagesSent = Counter(label: Self.messagesSentLabel, dimensions: dimensions, factory: factory)
        bytesReceived = Counter(label: Self.bytesReceivedLabel, dimensions: dimensions, factory: factory)
        bytesSent = Counter(label: Self.bytesSentLabel, dimensions: dimensions, factory: factory)
        sendQueueDepth = Meter(label: Self.sendQueueDepthLabel, dimensions: dimensions, factory: factory)
        callDuration = Timer(
            label: Self.callDurationLabel, dimensions: dimensions, preferredDisplayUnit: .seconds, factory: factory)
    }

    /// A connection attempt starts (`reconnect`: after a drop).
    package func attempt(reconnect: Bool) {
        connectionAttempts.increment()
        if reconnect { reconnects.increment() }
    }

    /// A connection opened (its handshake done).
    package func opened() { connectionsOpen.increment() }

    /// An open connection ended.
    package func closed() { connectionsOpen.decrement() }

    /// Messages and bytes from the peer.
    package func received(messages: Int, bytes: Int) {
        if messages > 0 { messagesReceived.increment(by: messages) }
        if bytes > 0 { bytesReceived.increment(by: bytes) }
    }

    /// Messages and bytes to the peer.
    package func sent(messages: Int, bytes: Int) {
        if messages > 0 { messagesSent.increment(by: messages) }
        if bytes > 0 { bytesSent.increment(by: bytes) }
    }

    /// Messages waiting to be sent now.
    package func queueDepth(_ count: Int) { sendQueueDepth.set(count) }

    /// A connection attempt failed, or an open connection dropped, with this error.
    package func failed(_ error: RealtimeError) {
        counter(in: byCode, label: Self.connectionFailuresLabel, key: "code", value: "\(error.code)").increment()
    }

    /// Messages the client dropped (`reason`: `queue_full`, `too_large`, `refused`, `closed`...).
    package func dropped(_ count: Int = 1, reason: String) {
        guard count > 0 else { return }
        counter(in: byReason, label: Self.messagesDroppedLabel, key: "reason", value: reason).increment(by: count)
    }

    /// The time from `start` (a `ContinuousClock` instant) to now, for an invocation or an ack.
    package func recordCall(since start: ContinuousClock.Instant) {
        let elapsed = ContinuousClock.now - start
        let (seconds, attoseconds) = elapsed.components
        callDuration.recordNanoseconds(seconds * 1_000_000_000 + attoseconds / 1_000_000_000)
    }

    private func counter(in cache: NIOLockedValueBox<[String: Counter]>, label: String, key: String, value: String) -> Counter {
        if let existing = cache.withLockedValue({ $0[value] }) { return existing }
        let made = Counter(label: label, dimensions: dimensions + [(key, value)], factory: factory)
        return cache.withLockedValue { cache in
            if let existing = cache[value] { return existing }
            cache[value] = made
            return made
        }
    }
}
