public import MetricsTestKit
import NIOConcurrencyHelpers

/// Reads one client's metrics from a swift-metrics `TestMetrics` factory (a runtime's
/// `metricsFactory` in tests), by the names Docs/Metrics.md documents.
public struct MetricsProbe: Sendable {
    /// The factory the client reports to.
    public let metrics: TestMetrics
    /// The `protocol` and `client` dimensions that select this client's metrics.
    public let dimensions: [(String, String)]

    /// Reads the metrics of the client with this protocol name (`sse`, `socketio`, `signalr`,
    /// `spreadbot`) and client label.
    public init(_ metrics: TestMetrics, protocol name: String, client: String = "default") {
        self.metrics = metrics
        dimensions = [("protocol", name), ("client", client)]
    }

    /// A counter's total (0 when it was never made).
    public func counter(_ label: String, _ extra: [(String, String)] = []) -> Int64 {
        metrics.counters(label: label, dimensions: dimensions + extra).reduce(0) { $0 + $1.totalValue }
    }

    /// A meter's last value (nil when it was never set).
    public func meter(_ label: String) -> Double? {
        metrics.meters(label: label, dimensions: dimensions).first?.lastValue
    }

    /// Every value a meter took, in order.
    public func meterValues(_ label: String) -> [Double] {
        metrics.meters(label: label, dimensions: dimensions).first?.values ?? []
    }

    /// How many durations a timer recorded.
    public func timerCount(_ label: String) -> Int {
        metrics.timers(label: label, dimensions: dimensions).first?.values.count ?? 0
    }
}
