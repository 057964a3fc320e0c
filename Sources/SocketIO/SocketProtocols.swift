public import Foundation
#if canImport(FoundationNetworking)
public import FoundationNetworking
#endif

// socket.io-client-swift's protocols, with the original's requirements. SocketManager,
// SocketIOClient and SocketEngine conform; apps used them to mock the client or to type a
// property. Default implementations are as the original's extensions.

/// The client's API, one socket per namespace.
public protocol SocketIOClientSpec: AnyObject {
    /// The handler of every event, if one was set.
    var anyHandler: ((SocketAnyEvent) -> ())? { get }
    /// The handlers.
    var handlers: [SocketEventHandler] { get }
    /// The manager.
    var manager: (any SocketManagerSpec)? { get }
    /// The namespace.
    var nsp: String { get }
    /// Emits that skip binary scanning.
    var rawEmitView: SocketRawView { get }
    /// The session id the server gave this namespace.
    var sid: String? { get }
    /// The status.
    var status: SocketIOStatus { get }
    /// Connects the namespace.
    func connect(withPayload payload: [String: Any]?)
    /// Connects; calls `handler` when not connected within `timeoutAfter` seconds.
    func connect(withPayload payload: [String: Any]?, timeoutAfter: Double, withHandler handler: (() -> ())?)
    /// The namespace connected.
    func didConnect(toNamespace namespace: String, payload: [String: Any]?)
    /// The namespace disconnected.
    func didDisconnect(reason: String)
    /// An error happened.
    func didError(reason: String)
    /// Leaves the namespace.
    func disconnect()
    /// Emits an event.
    func emit(_ event: String, _ items: any SocketData..., completion: (() -> ())?)
    /// Emits an event with an array of items.
    func emit(_ event: String, with items: [any SocketData], completion: (() -> ())?)
    /// Answers the server's ack `ack`.
    func emitAck(_ ack: Int, with items: [Any])
    /// Emits an event asking for an ack.
    func emitWithAck(_ event: String, _ items: any SocketData...) -> OnAckCallback
    /// Emits an event with an array of items, asking for an ack.
    func emitWithAck(_ event: String, with items: [any SocketData]) -> OnAckCallback
    /// An ack arrived.
    func handleAck(_ ack: Int, data: [Any])
    /// Raises a client event.
    func handleClientEvent(_ event: SocketClientEvent, data: [Any])
    /// Runs the handlers of an event.
    func handleEvent(_ event: String, data: [Any], isInternalMessage: Bool, withAck ack: Int)
    /// Handles a packet.
    func handlePacket(_ packet: SocketPacket)
    /// Leaves the namespace.
    func leaveNamespace()
    /// Joins the namespace.
    func joinNamespace(withPayload payload: [String: Any]?)
    /// Removes the handlers of a client event.
    func off(clientEvent event: SocketClientEvent)
    /// Removes the handlers of an event.
    func off(_ event: String)
    /// Removes one handler.
    func off(id: UUID)
    /// Adds a handler.
    @discardableResult
    func on(_ event: String, callback: @escaping NormalCallback) -> UUID
    /// Adds a handler of a client event.
    @discardableResult
    func on(clientEvent event: SocketClientEvent, callback: @escaping NormalCallback) -> UUID
    /// Adds a handler of the next client event.
    @discardableResult
    func once(clientEvent event: SocketClientEvent, callback: @escaping NormalCallback) -> UUID
    /// Adds a handler of the next event.
    @discardableResult
    func once(_ event: String, callback: @escaping NormalCallback) -> UUID
    /// Sets the handler of every event.
    func onAny(_ handler: @escaping (SocketAnyEvent) -> ())
    /// Removes every handler.
    func removeAllHandlers()
    /// Reconnecting began.
    func setReconnecting(reason: String)
}

extension SocketIOClientSpec {
    /// Raises `error` with `[reason]`.
    public func didError(reason: String) {
        DefaultSocketLogger.Logger.error("\(reason)", type: "SocketIOClient")
        handleClientEvent(.error, data: [reason])
    }
}

/// Callbacks from an engine to its client.
public protocol SocketEngineClient: AnyObject {
    /// The engine failed.
    func engineDidError(reason: String)
    /// The engine closed.
    func engineDidClose(reason: String)
    /// The engine opened.
    func engineDidOpen(reason: String)
    /// A ping arrived.
    func engineDidReceivePing()
    /// A pong arrived.
    func engineDidReceivePong()
    /// A ping was sent.
    func engineDidSendPing()
    /// A pong was sent.
    func engineDidSendPong()
    /// A message arrived.
    func parseEngineMessage(_ msg: String)
    /// Binary data arrived.
    func parseEngineBinaryData(_ data: Data)
    /// The WebSocket connected, with its response headers.
    func engineDidWebsocketUpgrade(headers: [String: String])
}

/// The manager's API.
public protocol SocketManagerSpec: SocketEngineClient {
    /// The socket of `/`.
    var defaultSocket: SocketIOClient { get }
    /// The engine.
    var engine: (any SocketEngineSpec)? { get set }
    /// Whether every connect opens a new engine.
    var forceNew: Bool { get set }
    /// The queue every handler, ack callback, timeout and completion runs on.
    var handleQueue: DispatchQueue { get set }
    /// The sockets, by namespace.
    var nsps: [String: SocketIOClient] { get set }
    /// Whether to reconnect after a drop.
    var reconnects: Bool { get set }
    /// Seconds before the first reconnect attempt.
    var reconnectWait: Int { get set }
    /// The longest wait between attempts, in seconds.
    var reconnectWaitMax: Int { get set }
    /// The jitter of the waits.
    var randomizationFactor: Double { get set }
    /// The server's URL.
    var socketURL: URL { get }
    /// The connection's status.
    var status: SocketIOStatus { get }
    /// The server's generation.
    var version: SocketIOVersion { get }
    /// Opens the connection.
    func connect()
    /// Connects a socket's namespace.
    func connectSocket(_ socket: SocketIOClient, withPayload: [String: Any]?)
    /// Every socket disconnected.
    func didDisconnect(reason: String)
    /// Closes the connection.
    func disconnect()
    /// Disconnects a socket's namespace.
    func disconnectSocket(_ socket: SocketIOClient)
    /// Disconnects the socket of a namespace.
    func disconnectSocket(forNamespace nsp: String)
    /// Emits on every namespace.
    func emitAll(_ event: String, _ items: any SocketData...)
    /// Closes the connection and reconnects.
    func reconnect()
    /// Forgets a socket.
    @discardableResult
    func removeSocket(_ socket: SocketIOClient) -> SocketIOClient?
    /// The socket of a namespace.
    func socket(forNamespace nsp: String) -> SocketIOClient
}

/// The engine's API.
public protocol SocketEngineSpec: AnyObject {
    /// The engine's client (the manager).
    var client: (any SocketEngineClient)? { get set }
    /// Whether the engine closed.
    var closed: Bool { get }
    /// Whether the WebSocket compresses.
    var compress: Bool { get }
    /// Whether the engine is open.
    var connected: Bool { get }
    /// The query parameters.
    var connectParams: [String: Any]? { get set }
    /// The cookies sent.
    var cookies: [HTTPCookie]? { get }
    /// The engine's queue.
    var engineQueue: DispatchQueue { get }
    /// The headers sent.
    var extraHeaders: [String: String]? { get set }
    /// Whether an upgrade is about to finish.
    var fastUpgrade: Bool { get }
    /// Whether only polling is used.
    var forcePolling: Bool { get }
    /// Whether only the WebSocket is used.
    var forceWebsockets: Bool { get }
    /// Whether the engine polls.
    var polling: Bool { get }
    /// Whether the WebSocket is being probed.
    var probing: Bool { get }
    /// The Engine.IO session id.
    var sid: String { get }
    /// The Engine.IO path.
    var socketPath: String { get }
    /// The polling URL.
    var urlPolling: URL { get }
    /// The WebSocket URL.
    var urlWebSocket: URL { get }
    /// The server's generation.
    var version: SocketIOVersion { get }
    /// Whether the WebSocket is used.
    @available(*, deprecated, message: "check the polling property instead")
    var websocket: Bool { get }
    /// Opens the engine.
    func connect()
    /// The engine failed.
    func didError(reason: String)
    /// Closes the engine.
    func disconnect(reason: String)
    /// Finishes an upgrade.
    func doFastUpgrade()
    /// Sends what waited for the upgrade.
    func flushWaitingForPostToWebSocket()
    /// Reads binary data.
    func parseEngineData(_ data: Data)
    /// Reads a message.
    func parseEngineMessage(_ message: String)
    /// Writes a message.
    func write(_ msg: String, withType type: SocketEnginePacketType, withData data: [Data], completion: (() -> ())?)
}

/// The polling part of an engine.
public protocol SocketEnginePollable: SocketEngineSpec {
    /// Whether the polling session was invalidated.
    var invalidated: Bool { get }
    /// Messages waiting to be posted.
    var postWait: [Post] { get set }
    /// Whether a poll is in flight.
    var waitingForPoll: Bool { get set }
    /// Whether a post is in flight.
    var waitingForPost: Bool { get set }
    /// Polls.
    func doPoll()
    /// Posts a message.
    func sendPollMessage(_ message: String, withType type: SocketEnginePacketType, withData datas: [Data], completion: (() -> ())?)
    /// Stops polling.
    func stopPolling()
}

/// The WebSocket part of an engine.
public protocol SocketEngineWebsocket: SocketEngineSpec {
    /// Whether the WebSocket is connected.
    var wsConnected: Bool { get }
    /// Sends a message on the WebSocket.
    func sendWebSocketMessage(_ str: String, withType type: SocketEnginePacketType, withData datas: [Data], completion: (() -> ())?)
}

/// Reads Socket.IO packets.
public protocol SocketParsable: AnyObject {
    /// Reads a binary attachment; the packet it completes, if any.
    func parseBinaryData(_ data: Data) -> SocketPacket?
    /// Reads a packet's text; nil when invalid.
    func parseSocketMessage(_ message: String) -> SocketPacket?
}

/// Holds packets waiting for their binary attachments.
public protocol SocketDataBufferable: AnyObject {
    /// The packets waiting.
    var waitingPackets: [SocketPacket] { get set }
}

extension SocketParsable where Self: SocketManagerSpec & SocketDataBufferable {
    /// The packet of `message`, or nil when it is not a valid packet. A binary packet waits in
    /// ``SocketDataBufferable/waitingPackets`` for its attachments.
    public func parseSocketMessage(_ message: String) -> SocketPacket? {
        guard let packet = SocketPacket.parse(message) else { return nil }
        if packet.type.isBinary {
            waitingPackets.append(packet)
            return nil
        }
        return packet
    }

    /// Adds a binary attachment to the first waiting packet; the packet once complete.
    public func parseBinaryData(_ data: Data) -> SocketPacket? {
        guard !waitingPackets.isEmpty else { return nil }
        waitingPackets[0].binary.append(data)
        return waitingPackets.removeFirst()
    }
}

/// Types that take a configuration.
public protocol ConfigSettable {
    /// Applies the options.
    mutating func setConfigs(_ config: SocketIOClientConfiguration)
}

/// A logger for the client's messages (the `.logger` option).
public protocol SocketLogger: AnyObject {
    /// Whether to log.
    var log: Bool { get set }
    /// Logs a message.
    func log(_ message: @autoclosure () -> String, type: String)
    /// Logs an error.
    func error(_ message: @autoclosure () -> String, type: String)
}

extension SocketLogger {
    /// Prints `LOG <type>: <message>` when ``log`` is on.
    public func log(_ message: @autoclosure () -> String, type: String) {
        guard log else { return }
        print("LOG \(type): \(message())")
    }

    /// Prints `ERROR <type>: <message>` when ``log`` is on.
    public func error(_ message: @autoclosure () -> String, type: String) {
        guard log else { return }
        print("ERROR \(type): \(message())")
    }
}

/// The logger the client uses; `.log(true)` turns it on, `.logger(_:)` replaces it.
public final class DefaultSocketLogger: SocketLogger {
    private static let current = LoggerBox()

    /// The logger in use (process-wide, as in the original).
    public static var Logger: any SocketLogger {
        get { current.get() }
        set { current.set(newValue) }
    }

    /// Whether to log.
    public var log: Bool

    init(log: Bool = false) { self.log = log }
}

// @unchecked Sendable: the one process-wide logger reference is read and replaced under the lock.
private final class LoggerBox: @unchecked Sendable {
    private let lock = NSLock()
    private var logger: any SocketLogger = DefaultSocketLogger()

    func get() -> any SocketLogger { lock.withLock { logger } }
    func set(_ logger: any SocketLogger) { lock.withLock { self.logger = logger } }
}
