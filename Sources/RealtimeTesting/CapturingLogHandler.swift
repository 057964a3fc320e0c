public import Logging
public import NIOConcurrencyHelpers

/// A log handler that keeps every rendered line (level, message and metadata), for tests that check
/// what logs show or print a client's log when a fault test fails.
public struct CapturingLogHandler: LogHandler {
    public let lines: NIOLockedValueBox<[String]>
    public var metadata: Logger.Metadata = [:]
    public var logLevel: Logger.Level = .trace

    public init(lines: NIOLockedValueBox<[String]>, logLevel: Logger.Level = .trace) {
        self.lines = lines
        self.logLevel = logLevel
    }

    public subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { metadata[key] }
        set { metadata[key] = newValue }
    }

    public func log(event: LogEvent) {
        let merged = metadata.merging(event.metadata ?? [:]) { $1 }
        lines.withLockedValue { $0.append("\(event.level) \(event.message) \(merged)") }
    }
}
