public import Logging
public import NIOConcurrencyHelpers

/// A log handler that keeps every rendered line (level, message and metadata), for tests that check
/// what logs show or print a client's log when a fault test fails.
public struct CapturingLogHandler: LogHandler {
    /// Every line logged, as `level message [metadata]`.
    public let lines: NIOLockedValueBox<[String]>
    /// The handler's metadata, added to every line.
    public var metadata: Logger.Metadata = [:]
    /// The lowest level captured (trace by default: everything).
    public var logLevel: Logger.Level = .trace

    /// Makes a handler that appends each line to `lines`.
    public init(lines: NIOLockedValueBox<[String]>, logLevel: Logger.Level = .trace) {
        self.lines = lines
        self.logLevel = logLevel
    }

    /// The handler's metadata value for `key`.
    public subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { metadata[key] }
        set { metadata[key] = newValue }
    }

    /// Appends the event's line.
    public func log(event: LogEvent) {
        let merged = metadata.merging(event.metadata ?? [:]) { $1 }
        lines.withLockedValue { $0.append("\(event.level) \(event.message) \(merged)") }
    }
}
