import Foundation
internal import RealtimeCore
import Logging

/// How much to log, as SwiftSignalRClient numbers it (a higher raw value is more verbose). The
/// official client's `.information` is the same level as `.info`; its raw values (debug 0 ...
/// error 3) are not kept.
public enum LogLevel: Int, Sendable {
    /// Errors only.
    case error = 1
    /// Errors and warnings.
    case warning = 2
    /// Connection lifecycle and calls.
    case info = 3
    /// Everything, including message contents.
    case debug = 4

    /// The official client's name for ``info``.
    public static var information: LogLevel { .info }
}

extension LogLevel {
    /// The level's name: "error", "warning", "info" or "debug".
    public func toString() -> String {
        switch self {
        case .error: "error"
        case .warning: "warning"
        case .info: "info"
        case .debug: "debug"
        }
    }

    init(_ level: Logging.Logger.Level) {
        switch level {
        case .trace, .debug: self = .debug
        case .info, .notice: self = .info
        case .warning: self = .warning
        case .error, .critical: self = .error
        }
    }

    var swiftLogLevel: Logging.Logger.Level {
        switch self {
        case .error: .error
        case .warning: .warning
        case .info: .info
        case .debug: .debug
        }
    }
}

/// SwiftSignalRClient's log sink.
public protocol Logger {
    /// Writes one entry.
    func log(logLevel: LogLevel, message: @autoclosure () -> String)
}

/// Writes each entry with `print`: an ISO 8601 time, the level and the message.
public class PrintLogger: Logger {
    /// Makes a logger.
    public init() {}

    /// Prints the entry.
    public func log(logLevel: LogLevel, message: @autoclosure () -> String) {
        let time = ISO8601DateFormatter().string(from: Date())
        print("\(time) \(logLevel.toString()): \(message())")
    }
}

/// Discards every entry: the default.
public class NullLogger: Logger {
    /// Makes a logger.
    public init() {}

    /// Does nothing.
    public func log(logLevel: LogLevel, message: @autoclosure () -> String) {}
}

/// The official client's log sink.
public protocol LogHandler: Sendable {
    /// Writes one entry.
    func log(logLevel: LogLevel, message: LogMessage, file: String, function: String, line: UInt)
}

/// One log entry's text, written with string interpolation.
public struct LogMessage: ExpressibleByStringInterpolation, CustomStringConvertible, Sendable {
    /// The text.
    public let description: String

    /// Makes a message from a literal.
    public init(stringLiteral value: String) { description = value }

    /// Makes a message from an interpolation.
    public init(stringInterpolation: DefaultStringInterpolation) { description = String(stringInterpolation: stringInterpolation) }
}

/// Where this package's entries go: a swift-log handler that hands each entry at or above
/// `minimum` to the app's ``Logger`` or ``LogHandler``.
struct ForwardingLogHandler: Logging.LogHandler {
    let sink: HandOff<(LogLevel, String, String, String, UInt) -> Void>
    var logLevel: Logging.Logger.Level
    var metadata: Logging.Logger.Metadata = [:]

    subscript(metadataKey key: String) -> Logging.Logger.Metadata.Value? {
        get { metadata[key] }
        set { metadata[key] = newValue }
    }

    func log(event: Logging.LogEvent) {
        let fields = metadata.merging(event.metadata ?? [:]) { _, new in new }
        let text = fields.isEmpty ? "\(event.message)" : "\(event.message) \(fields.sorted { $0.key < $1.key }.map { "\($0.key)=\($0.value)" }.joined(separator: " "))"
        sink.value(LogLevel(event.level), text, event.file, event.function, event.line)
    }

    static func logger(minimum: LogLevel, logger: any Logger) -> Logging.Logger {
        let box = HandOff<(LogLevel, String, String, String, UInt) -> Void> { level, text, _, _, _ in
            logger.log(logLevel: level, message: text)
        }
        return Logging.Logger(label: "SignalRClient") { _ in ForwardingLogHandler(sink: box, logLevel: minimum.swiftLogLevel) }
    }

    static func logger(minimum: LogLevel, handler: any LogHandler) -> Logging.Logger {
        let box = HandOff<(LogLevel, String, String, String, UInt) -> Void> { level, text, file, function, line in
            handler.log(logLevel: level, message: LogMessage(stringLiteral: text), file: file, function: function, line: line)
        }
        return Logging.Logger(label: "SignalRClient") { _ in ForwardingLogHandler(sink: box, logLevel: minimum.swiftLogLevel) }
    }
}
