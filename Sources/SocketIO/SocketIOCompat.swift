public import Foundation
import Logging
import NIOConcurrencyHelpers
import NIOHTTP1
import RealtimeCore
@_exported public import SocketIOEngine

// The shape of socket.io-client-swift (v15/v16), so its documented usage compiles with only the
// import changed (`import SocketIO` -> `import SocketIO`). Callbacks must be `@Sendable`.
// New code imports SocketIOEngine, whose `connect` and `emitWithAck` are only the async ones.

/// socket.io-client-swift's options.
// @unchecked Sendable: every case holds an immutable value type; only `.connectParams` holds
// `[String: Any]` (the original API's type). Its values are read once, when `SocketManager`'s
// initializer turns the options into a configuration (`apply(to:)`, which only describes each value
// as a string), so nothing in it is touched from another thread afterwards.
/// One of socket.io-client-swift's connection options; each sets the `SocketIOConfiguration`
/// or `EngineIOOptions` property of the same meaning.
public enum SocketIOClientOption: @unchecked Sendable {
    /// With true, log the client's activity at debug level to the process's logging backend.
    case log(Bool)
    /// Ask for permessage-deflate on the WebSocket.
    case compress
    /// Query parameters sent with every Engine.IO request.
    case connectParams([String: Any])
    /// Headers sent with every request and the WebSocket upgrade.
    case extraHeaders([String: String])
    /// Reconnect after a drop (default true).
    case reconnects(Bool)
    /// Reconnect attempts before giving up (-1: no limit).
    case reconnectAttempts(Int)
    /// Seconds.
    case reconnectWait(Int)
    /// Seconds.
    case reconnectWaitMax(Int)
    /// The jitter of the reconnect delays (0-1).
    case randomizationFactor(Double)
    /// Use the WebSocket transport only.
    case forceWebsockets(Bool)
    /// Use long polling only.
    case forcePolling(Bool)
    /// socket.io-client-swift: "always create a new engine". swift-realtime opens a new Engine.IO
    /// session for every connection and reconnection, so this is always the behaviour.
    @available(*, deprecated, message: "swift-realtime opens a new Engine.IO session for every connection, as forceNew(true) asked; remove this option")
    case forceNew(Bool)
    /// The server's Engine.IO path (default `/socket.io/`).
    case path(String)
    /// Use TLS (`https`/`wss`).
    case secure(Bool)
    /// Accept a self-signed certificate (turns certificate checking off).
    case selfSigned(Bool)
    /// The server's Socket.IO generation: `.two` for socket.io 2.x servers (Engine.IO 3),
    /// `.three` for 3.x and 4.x (the default). Sets `SocketIOConfiguration.version`.
    case version(SocketIOVersionOption)
}

/// socket.io-client-swift's `SocketIOVersion`: which servers the client speaks to.
public enum SocketIOVersionOption: Int, Sendable {
    /// socket.io 2.x servers: `SocketIOVersion.v2`.
    case two = 2
    /// socket.io 3.x and 4.x servers: `SocketIOVersion.v3`.
    case three = 3
}

/// A list of ``SocketIOClientOption``, written as an array literal.
public struct SocketIOClientConfiguration: ExpressibleByArrayLiteral, Sendable {
    /// The options, in order; a later one overrides an earlier one.
    public var options: [SocketIOClientOption]
    /// The options of an array literal.
    public init(arrayLiteral elements: SocketIOClientOption...) { options = elements }
    /// The options of an array.
    public init(_ options: [SocketIOClientOption]) { self.options = options }

    /// The Objective-C style dictionary (`["log": true, "connectParams": [...]]`).
    public init(dictionary: [String: Any]) {
        var options: [SocketIOClientOption] = []
        for (key, value) in dictionary {
            switch (key, value) {
            case ("log", let flag as Bool): options.append(.log(flag))
            case ("compress", let flag as Bool): if flag { options.append(.compress) }
            case ("connectParams", let params as [String: Any]): options.append(.connectParams(params))
            case ("extraHeaders", let headers as [String: String]): options.append(.extraHeaders(headers))
            case ("reconnects", let flag as Bool): options.append(.reconnects(flag))
            case ("reconnectAttempts", let count as Int): options.append(.reconnectAttempts(count))
            case ("reconnectWait", let seconds as Int): options.append(.reconnectWait(seconds))
            case ("reconnectWaitMax", let seconds as Int): options.append(.reconnectWaitMax(seconds))
            case ("randomizationFactor", let factor as Double): options.append(.randomizationFactor(factor))
            case ("forceWebsockets", let flag as Bool): options.append(.forceWebsockets(flag))
            case ("forcePolling", let flag as Bool): options.append(.forcePolling(flag))
            // "forceNew": always the behaviour (a new Engine.IO session per connection); ignored.
            case ("path", let path as String): options.append(.path(path))
            case ("secure", let flag as Bool): options.append(.secure(flag))
            case ("selfSigned", let flag as Bool): options.append(.selfSigned(flag))
            case ("version", let number as Int): if let version = SocketIOVersionOption(rawValue: number) { options.append(.version(version)) }
            default: break
            }
        }
        self.options = options
    }

    /// The equivalent ``SocketIOConfiguration``; `secure` switches the URL to https/wss.
    func apply(to url: URL) -> (String, SocketIOConfiguration) {
        var configuration = SocketIOConfiguration()
        var urlText = url.absoluteString
        for option in options {
            switch option {
            case .log(let on):
                if on {
                    // The process's logging backend (stdout unless LoggingSystem was bootstrapped).
                    var logger = Logger(label: "SocketIO")
                    logger.logLevel = .debug
                    configuration.runtime = configuration.runtime.logging(to: logger)
                }
            case .compress: configuration.engine.compression = true
            case .connectParams(let params):
                for (key, value) in params { configuration.engine.query[key] = "\(value)" }
            case .extraHeaders(let headers):
                for (name, value) in headers { configuration.engine.headers.replaceOrAdd(name: name, value: value) }
            case .reconnects(let on): configuration.reconnection = on
            case .reconnectAttempts(let count): configuration.reconnectionAttempts = count < 0 ? nil : count
            case .reconnectWait(let seconds): configuration.reconnectionDelay = .seconds(seconds)
            case .reconnectWaitMax(let seconds): configuration.reconnectionDelayMax = .seconds(seconds)
            case .randomizationFactor(let factor): configuration.randomizationFactor = factor
            case .forceWebsockets(let on):
                if on {
                    configuration.engine.transports = [.websocket]
                    configuration.engine.upgrade = false
                }
            case .forcePolling(let on):
                if on {
                    configuration.engine.transports = [.polling]
                    configuration.engine.upgrade = false
                }
            case .path(let path): configuration.engine.path = path
            case .secure(let on):
                if on, urlText.hasPrefix("http://") { urlText = "https://" + urlText.dropFirst("http://".count) }
                if on, urlText.hasPrefix("ws://") { urlText = "wss://" + urlText.dropFirst("ws://".count) }
            case .selfSigned(let on):
                if on { configuration.engine.tls = .dangerouslyDisableCertificateVerification() }
            case .version(let version): configuration.version = version == .two ? .v2 : .v3
            default:
                break  // .forceNew: always the behaviour
            }
        }
        return (urlText, configuration)
    }
}

extension SocketManager {
    /// socket.io-client-swift's initializer.
    public convenience init(socketURL: URL, config: SocketIOClientConfiguration = []) {
        let (url, configuration) = config.apply(to: socketURL)
        self.init(url: url, configuration: configuration)
    }

    /// The Objective-C style initializer with a dictionary of options.
    public convenience init(socketURL: URL, config: [String: Any]) {
        self.init(socketURL: socketURL, config: SocketIOClientConfiguration(dictionary: config))
    }

    /// The socket for a namespace (socket.io-client-swift spelling).
    public func socket(forNamespace namespace: String) -> SocketIOClient {
        socket(forNamespace: namespace, auth: nil)
    }
}

/// Answers a server's ack request from a callback-style handler.
public final class SocketAckEmitter: Sendable {
    let event: SocketIOEvent

    init(event: SocketIOEvent) { self.event = event }

    /// Whether the server asked for an ack.
    public var expected: Bool { event.expectsAck }

    /// Answers the server's ack with these values (once; values without a JSON form answer nothing).
    public func with(_ items: any SocketData...) {
        guard let values = try? items.map({ try $0.socketRepresentation() }) else { return }
        event.ack(arguments: values)
    }

    /// Answers the server's ack with these Foundation values (once; values without a JSON form answer
    /// nothing).
    public func with(_ items: [Any]) {
        guard let values = try? items.map({ try JSONValue(any: $0) }) else { return }
        event.ack(arguments: values)
    }
}

/// Returned by the callback-style `emitWithAck`; the packet is sent when ``timingOut(after:callback:)``
/// is called.
public final class OnAckCallback: Sendable {
    private let socket: SocketIOClient
    private let event: String
    private let arguments: Result<[JSONValue], any Error>

    init(socket: SocketIOClient, event: String, arguments: Result<[JSONValue], any Error>) {
        self.socket = socket
        self.event = event
        self.arguments = arguments
    }

    /// Sends the event; `callback` gets the ack's items, or `["NO ACK"]` when `seconds` pass first.
    /// As in socket.io-client-swift, 0 means no timeout (the ack may then never come; prefer the
    /// async `emitWithAck(_:arguments:timeout:)`, whose timeout always fires).
    public func timingOut(after seconds: Double, callback: @escaping @Sendable ([Any]) -> Void) {
        let arguments: [JSONValue]
        switch self.arguments {
        case .success(let values): arguments = values
        case .failure(let error):
            socket.fire(.error, [.string("emitWithAck \(event) failed: \(error)")])
            return
        }
        let timeout: Duration? = seconds > 0 ? .milliseconds(Int64(seconds * 1000)) : nil
        socket.emitExpectingAck(event, arguments: arguments, timeout: timeout) { result in
            switch result {
            case .success(let values): callback(values.map(\.anyValue))
            case .failure: callback(["NO ACK"])
            }
        }
    }
}

extension SocketIOClient {
    /// Callback-style handler: `data` as Foundation values, `ack` to answer the server.
    @discardableResult
    public func on(_ event: String, callback: @escaping @Sendable ([Any], SocketAckEmitter) -> Void) -> UUID {
        addHandler(event, once: false) { event in callback(event.arguments.map(\.anyValue), SocketAckEmitter(event: event)) }
    }

    /// Callback-style handler run for the next `event` only.
    @discardableResult
    public func once(_ event: String, callback: @escaping @Sendable ([Any], SocketAckEmitter) -> Void) -> UUID {
        addHandler(event, once: true) { event in callback(event.arguments.map(\.anyValue), SocketAckEmitter(event: event)) }
    }

    /// Callback-style handler of a client event (`connect`, `disconnect`, `error`...).
    @discardableResult
    public func on(clientEvent event: SocketClientEvent, callback: @escaping @Sendable ([Any], SocketAckEmitter) -> Void) -> UUID {
        on(event.rawValue, callback: callback)
    }

    /// Callback-style emit with an ack: call `.timingOut(after:callback:)` on the result to send it.
    public func emitWithAck(_ event: String, _ items: any SocketData...) -> OnAckCallback {
        OnAckCallback(socket: self, event: event, arguments: Result { try items.map { try $0.socketRepresentation() } })
    }

    /// Callback-style emit with an ack, with Foundation values: call `.timingOut(after:callback:)` on
    /// the result to send it.
    public func emitWithAck(_ event: String, with items: [Any]) -> OnAckCallback {
        OnAckCallback(socket: self, event: event, arguments: Result { try items.map { try JSONValue(any: $0) } })
    }

    /// Starts connecting this namespace and returns at once; watch `SocketIOClient/status` or the
    /// `connect` event. Emits made meanwhile are queued.
    public func connect() { requestConnection(auth: nil) }

    /// Starts connecting with `auth` as the CONNECT payload (kept for reconnects); returns at once.
    public func connect(auth: SocketIOAuth?) { requestConnection(auth: auth) }

    /// Emits an event; failures (a full queue, a value with no JSON form) are reported as `error`
    /// client events, as socket.io-client-swift did.
    public func emit(_ event: String, _ items: any SocketData..., completion: (@Sendable () -> Void)? = nil) {
        emitReportingErrors(event, completion: completion) { try items.map { try $0.socketRepresentation() } }
    }

    /// Emits with Foundation values (`[Any]`), as in socket.io-client-swift's `emit(_:with:)`.
    public func emit(_ event: String, with items: [Any], completion: (@Sendable () -> Void)? = nil) {
        emitReportingErrors(event, completion: completion) { try items.map { try JSONValue(any: $0) } }
    }

    private func emitReportingErrors(_ event: String, completion: (@Sendable () -> Void)?, _ arguments: () throws -> [JSONValue]) {
        do {
            try emit(event, arguments: arguments())
            completion?()
        } catch {
            fire(.error, [.string("emit \(event) failed: \(error)")])
        }
    }

    /// Connects with a payload (the namespace's auth object).
    public func connect(withPayload payload: [String: Any]?) {
        guard let payload else { return connect() }
        do {
            connect(auth: .value(try JSONValue(any: payload)))
        } catch {
            fire(.error, [.string("the connect payload has no JSON form: \(error)")])
        }
    }

    /// Connects; if not connected within `timeoutAfter` seconds, calls `handler` (0 = no timeout).
    public func connect(withPayload payload: [String: Any]? = nil, timeoutAfter: Double, withHandler handler: (@Sendable () -> Void)?) {
        connect(withPayload: payload)
        guard timeoutAfter > 0, let handler else { return }
        // Unstructured: the older API returns at once and reports the timeout through `handler`.
        Task {
            try? await Task.sleep(for: .milliseconds(Int64(timeoutAfter * 1000)))
            if self.status != .connected { handler() }
        }
    }

    /// The manager this socket belongs to.
    public var socketManager: SocketManager? { manager }
}
