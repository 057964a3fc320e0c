public import Foundation
#if canImport(FoundationNetworking)
public import FoundationNetworking
#endif
internal import NIOConcurrencyHelpers
internal import RealtimeCore
internal import SocketIOEngine

/// Owns the connection to a server and one ``SocketIOClient`` per namespace. Keep a reference to
/// it for as long as its sockets are used.
///
/// Settings changed after the connection opened apply to the next connection the manager opens
/// (after ``disconnect()`` or ``reconnect()``).
// @unchecked Sendable: every stored property is read and written under `lock`; the handlers its
// sockets hold only run on `handleQueue`.
open class SocketManager: NSObject, SocketManagerSpec, SocketParsable, SocketDataBufferable, ConfigSettable, @unchecked Sendable {
    /// The server's URL.
    public let socketURL: URL

    private let lock = NIOLock()
    private var settings = ManagerSettings()
    private var storedConfig: SocketIOClientConfiguration = []
    private var storedNsps: [String: SocketIOClient] = [:]
    private var storedWaitingPackets: [SocketPacket] = []
    private var storedEngine: (any SocketEngineSpec)?
    /// SocketIOEngine's manager of the current connection; a new one is made for a connection
    /// opened after the previous one ended.
    private var current: SocketIOEngine.SocketManager?
    private var stopped = false

    /// A manager for the server at `socketURL` (an `https` URL turns `.secure(true)` on).
    public init(socketURL: URL, config: SocketIOClientConfiguration = []) {
        self.socketURL = socketURL
        super.init()
        var config = config
        if socketURL.absoluteString.hasPrefix("https://") { config.insert(.secure(true)) }
        setConfigs(config)
    }

    /// A manager with the options as a dictionary (`["log": true, "compress": true]`).
    public convenience init(socketURL: URL, config: [String: Any]?) {
        self.init(socketURL: socketURL, config: SocketIOClientConfiguration(dictionary: config ?? [:]))
    }

    /// A manager let go closes its connection, as the original's does.
    deinit {
        lock.withLock { current }?.disconnect()
    }

    // MARK: Settings

    /// The options; setting them applies them (to the next connection for the connection's own).
    public var config: SocketIOClientConfiguration {
        get { lock.withLock { storedConfig } }
        set { setConfigs(newValue) }
    }

    /// Applies `config`.
    open func setConfigs(_ config: SocketIOClientConfiguration) {
        lock.withLock {
            storedConfig = config
            settings.apply(config)
        }
    }

    /// The queue every handler, ack callback, timeout and completion runs on: `DispatchQueue.main`
    /// unless `.handleQueue(_:)` or this property says otherwise. It must be serial. On Linux the
    /// main queue runs only while the main thread is in `dispatchMain()` or `RunLoop.main.run()`.
    public var handleQueue: DispatchQueue {
        get { lock.withLock { settings.handleQueue } }
        set { lock.withLock { settings.handleQueue = newValue } }
    }

    /// Whether every connection opens a new Engine.IO session (here it always does).
    public var forceNew: Bool {
        get { lock.withLock { settings.forceNew } }
        set { lock.withLock { settings.forceNew = newValue } }
    }

    /// Whether to reconnect after a drop (default true).
    public var reconnects: Bool {
        get { lock.withLock { settings.reconnects } }
        set { lock.withLock { settings.reconnects = newValue } }
    }

    /// Seconds before the first reconnect attempt (default 10).
    public var reconnectWait: Int {
        get { lock.withLock { settings.reconnectWait } }
        set { lock.withLock { settings.reconnectWait = abs(newValue) } }
    }

    /// The longest wait between attempts, in seconds (default 30).
    public var reconnectWaitMax: Int {
        get { lock.withLock { settings.reconnectWaitMax } }
        set { lock.withLock { settings.reconnectWaitMax = abs(newValue) } }
    }

    /// The jitter of the waits (default 0.5).
    public var randomizationFactor: Double {
        get { lock.withLock { settings.randomizationFactor } }
        set { lock.withLock { settings.randomizationFactor = newValue } }
    }

    var reconnectAttempts: Int { lock.withLock { settings.reconnectAttempts } }

    /// The server's generation.
    public private(set) var version: SocketIOVersion {
        get { lock.withLock { settings.version } }
        set { lock.withLock { settings.version = newValue } }
    }

    /// The engine of the connection (a view of its state).
    public var engine: (any SocketEngineSpec)? {
        get { lock.withLock { storedEngine } }
        set { lock.withLock { storedEngine = newValue } }
    }

    /// The sockets, by namespace.
    public var nsps: [String: SocketIOClient] {
        get { lock.withLock { storedNsps } }
        set { lock.withLock { storedNsps = newValue } }
    }

    /// Packets waiting for their binary attachments (used by ``parseSocketMessage(_:)``).
    public var waitingPackets: [SocketPacket] {
        get { lock.withLock { storedWaitingPackets } }
        set { lock.withLock { storedWaitingPackets = newValue } }
    }

    /// The connection's status: connecting, connected, not connected after it closed,
    /// disconnected after ``disconnect()``.
    public private(set) var status: SocketIOStatus {
        get {
            let (manager, isStopped) = lock.withLock { (self.current, self.stopped) }
            if isStopped { return .disconnected }
            guard let manager else { return .notConnected }
            switch manager.connectionState.current {
            case .connecting, .reconnecting: return .connecting
            case .connected: return .connected
            case .disconnected: return .notConnected
            }
        }
        set { lock.withLock { stopped = newValue == .disconnected } }
    }

    // MARK: Sockets

    /// The socket of `/`.
    public var defaultSocket: SocketIOClient { socket(forNamespace: "/") }

    /// The socket of `nsp` (made on first use; one per namespace, kept by the manager).
    open func socket(forNamespace nsp: String) -> SocketIOClient {
        let name = nsp.hasPrefix("/") ? nsp : "/" + nsp
        return lock.withLock {
            if let socket = storedNsps[name] { return socket }
            let socket = SocketIOClient(manager: self, nsp: name)
            storedNsps[name] = socket
            return socket
        }
    }

    /// Forgets `socket`; returns it if it was this manager's.
    @discardableResult
    open func removeSocket(_ socket: SocketIOClient) -> SocketIOClient? {
        lock.withLock { storedNsps.removeValue(forKey: socket.nsp) }
    }

    /// The engine's socket for `nsp` on the current connection, making the connection's manager
    /// when none is running.
    func engineSocket(forNamespace nsp: String) -> SocketIOEngine.SocketIOClient {
        engineManager().socket(forNamespace: nsp)
    }

    private func engineManager() -> SocketIOEngine.SocketManager {
        lock.withLock {
            stopped = false
            if let current, current.isRunning { return current }
            let (url, configuration) = settings.engineConfiguration(for: socketURL)
            let manager = SocketIOEngine.SocketManager(url: url, configuration: configuration)
            current = manager
            storedEngine = SocketEngine(manager: manager, settings: settings, socketURL: socketURL)
            return manager
        }
    }

    // MARK: Connecting

    /// Opens the connection; namespaces join when their sockets connect.
    open func connect() {
        engineManager().openConnection()
    }

    /// Connects `socket`'s namespace.
    open func connectSocket(_ socket: SocketIOClient, withPayload payload: [String: Any]? = nil) {
        socket.connect(withPayload: payload)
    }

    /// Every socket leaves with `reason` (`statusChange`, `disconnect` `[reason]`).
    open func didDisconnect(reason: String) {
        for socket in nsps.values { socket.leave(reason: reason) }
    }

    /// Disconnects every socket (`disconnect` `["Disconnect"]`) and closes the connection.
    open func disconnect() {
        for socket in nsps.values { socket.leave(reason: "Disconnect") }
        let manager = lock.withLock { () -> SocketIOEngine.SocketManager? in
            stopped = true
            return current
        }
        manager?.disconnect()
    }

    /// Leaves `socket`'s namespace.
    open func disconnectSocket(_ socket: SocketIOClient) { socket.disconnect() }

    /// Leaves the namespace `nsp` and forgets its socket.
    open func disconnectSocket(forNamespace nsp: String) {
        guard let socket = lock.withLock({ storedNsps.removeValue(forKey: nsp) }) else { return }
        socket.disconnect()
    }

    /// Emits `event` on every namespace.
    open func emitAll(_ event: String, _ items: any SocketData...) {
        for socket in nsps.values { socket.emit(event, with: items, completion: nil) }
    }

    /// Raises a client event on every socket (on the handle queue).
    open func emitAll(clientEvent event: SocketClientEvent, data: [Any]) {
        let sockets = Array(nsps.values)
        let items = HandOff(data)
        handleQueue.async { for socket in sockets { socket.handleClientEvent(event, data: items.value) } }
    }

    /// Closes the connection and opens a new one: each connected socket raises `statusChange`
    /// (connecting) and `reconnect` `["manual reconnect"]`, then `connect` once joined again.
    /// Does nothing while reconnecting.
    open func reconnect() {
        guard let manager = lock.withLock({ current }) else { return }
        if case .reconnecting = manager.connectionState.current { return }
        let sockets = nsps.values.filter { $0.beginManualReconnect() }
        let queue = handleQueue
        for socket in sockets {
            queue.async { socket.setReconnecting(reason: "manual reconnect") }
        }
        manager.disconnect()
        lock.withLock { if current === manager { current = nil } }
        for socket in sockets { socket.connect(withPayload: nil) }
    }

    // MARK: Engine callbacks (SocketEngineClient)

    /// The engine failed: `error` `[reason]` on every socket.
    open func engineDidError(reason: String) { emitAll(clientEvent: .error, data: [reason]) }

    /// The engine closed: every socket leaves with `reason`.
    open func engineDidClose(reason: String) { didDisconnect(reason: reason) }

    /// The engine opened.
    open func engineDidOpen(reason: String) {}

    /// `ping` on every socket.
    open func engineDidReceivePing() { emitAll(clientEvent: .ping, data: []) }

    /// `ping` on every socket.
    open func engineDidSendPing() { emitAll(clientEvent: .ping, data: []) }

    /// `pong` on every socket.
    open func engineDidReceivePong() { emitAll(clientEvent: .pong, data: []) }

    /// `pong` on every socket.
    open func engineDidSendPong() { emitAll(clientEvent: .pong, data: []) }

    /// `websocketUpgrade` `[headers]` on every socket.
    open func engineDidWebsocketUpgrade(headers: [String: String]) { emitAll(clientEvent: .websocketUpgrade, data: [headers]) }

    /// Reads a Socket.IO packet's text and hands it to its namespace's socket (on the handle queue).
    open func parseEngineMessage(_ msg: String) {
        guard let packet = parseSocketMessage(msg) else { return }
        deliver(packet)
    }

    /// Reads a binary attachment; a completed packet goes to its namespace's socket.
    open func parseEngineBinaryData(_ data: Data) {
        guard let packet = parseBinaryData(data) else { return }
        deliver(packet)
    }

    private func deliver(_ packet: SocketPacket) {
        guard let socket = nsps[packet.nsp] else { return }
        let box = HandOff(packet)
        handleQueue.async { socket.handlePacket(box.value) }
    }
}

/// A view of a manager's Engine.IO connection, with the original engine's properties. The
/// transport is SocketIOEngine's and cannot be replaced or driven from here: the methods that
/// wrote to or parsed for the original's transport have no effect.
// @unchecked Sendable: the stored properties are immutable except `client` and the option
// values, which are read and written under `lock`.
open class SocketEngine: NSObject, SocketEnginePollable, SocketEngineWebsocket, ConfigSettable, @unchecked Sendable {
    private let manager: SocketIOEngine.SocketManager
    private let lock = NIOLock()
    private var settings: ManagerSettings
    private weak var storedClient: (any SocketEngineClient)?
    private let base: URL

    init(manager: SocketIOEngine.SocketManager, settings: ManagerSettings, socketURL: URL) {
        self.manager = manager
        self.settings = settings
        self.base = socketURL
        super.init()
    }

    /// A user-made engine.
    @available(*, unavailable, message: "the engine is made by SocketManager and cannot be replaced; configure it with SocketManager's options")
    public init(client: any SocketEngineClient, url: URL, config: SocketIOClientConfiguration) { fatalError("unavailable") }

    /// A user-made engine.
    @available(*, unavailable, message: "the engine is made by SocketManager and cannot be replaced; configure it with SocketManager's options")
    public required convenience init(client: any SocketEngineClient, url: URL, options: [String: Any]?) { fatalError("unavailable") }

    /// The engine's queue (the manager's handle queue).
    public var engineQueue: DispatchQueue { lock.withLock { settings.handleQueue } }

    /// The client (the manager).
    public weak var client: (any SocketEngineClient)? {
        get { lock.withLock { storedClient } }
        set { lock.withLock { storedClient = newValue } }
    }

    /// The query parameters sent (a change applies to the next connection).
    public var connectParams: [String: Any]? {
        get { lock.withLock { settings.connectParams } }
        set { lock.withLock { settings.connectParams = newValue } }
    }

    /// The headers sent (a change applies to the next connection).
    public var extraHeaders: [String: String]? {
        get { lock.withLock { settings.extraHeaders } }
        set { lock.withLock { settings.extraHeaders = newValue } }
    }

    /// Always empty: messages are queued by SocketIOEngine's transport.
    public var postWait: [Post] {
        get { [] }
        set {}
    }

    /// Always false here (SocketIOEngine's transport polls by itself).
    public var waitingForPoll: Bool {
        get { false }
        set {}
    }

    /// Always false here (SocketIOEngine's transport posts by itself).
    public var waitingForPost: Bool {
        get { false }
        set {}
    }

    /// Whether the connection ended.
    public var closed: Bool {
        if case .disconnected = manager.connectionState.current { return true }
        return false
    }

    /// Whether the WebSocket compresses.
    public var compress: Bool { lock.withLock { settings.compress } }

    /// Whether the connection is open.
    public var connected: Bool { manager.connectionState.current.isConnected }

    /// The cookies sent.
    public var cookies: [HTTPCookie]? { lock.withLock { settings.cookies } }

    /// Always false (SocketIOEngine finishes upgrades itself).
    public var fastUpgrade: Bool { false }

    /// Whether only polling is used.
    public var forcePolling: Bool { lock.withLock { settings.forcePolling } }

    /// Whether only the WebSocket is used.
    public var forceWebsockets: Bool { lock.withLock { settings.forceWebsockets } }

    /// Always false (no URLSession).
    public var invalidated: Bool { false }

    /// Whether the connection polls.
    public var polling: Bool { manager.transport == .polling }

    /// Always false (probes are SocketIOEngine's).
    public var probing: Bool { false }

    /// The Engine.IO session id ("" before the first handshake).
    public var sid: String { manager.handshake?.sid ?? "" }

    /// The Engine.IO path.
    public var socketPath: String { lock.withLock { settings.path } }

    /// The polling URL.
    public var urlPolling: URL { url(scheme: ["https": "https", "wss": "https"], fallback: "http") }

    /// The WebSocket URL.
    public var urlWebSocket: URL { url(scheme: ["https": "wss", "wss": "wss"], fallback: "ws") }

    private func url(scheme: [String: String], fallback: String) -> URL {
        let settings = lock.withLock { self.settings }
        var components = URLComponents(url: base, resolvingAgainstBaseURL: false) ?? URLComponents()
        let secure = settings.secure || components.scheme == "https" || components.scheme == "wss"
        components.scheme = secure ? (scheme["https"] ?? fallback) : fallback
        components.path = settings.path
        var items = [URLQueryItem(name: "transport", value: fallback.hasPrefix("ws") ? "websocket" : "polling"),
                     URLQueryItem(name: "EIO", value: settings.version == .two ? "3" : "4")]
        for key in (settings.connectParams ?? [:]).keys.sorted() { items.append(URLQueryItem(name: key, value: "\(settings.connectParams![key]!)")) }
        components.queryItems = items
        return components.url ?? base
    }

    /// Always true (there is no Starscream).
    public var useCustomEngine: Bool { true }

    /// The server's generation.
    public var version: SocketIOVersion { lock.withLock { settings.version } }

    /// Whether the WebSocket is in use.
    @available(*, deprecated, message: "check the polling property instead")
    public var websocket: Bool { manager.transport == .websocket }

    /// Whether a SOCKS proxy was asked for (no effect).
    public var enableSOCKSProxy: Bool { false }

    /// Whether the WebSocket is connected.
    public var wsConnected: Bool { manager.transport == .websocket }

    /// Starscream's WebSocket.
    @available(*, unavailable, message: "there is no Starscream WebSocket; the transport is internal")
    public var ws: WebSocket? { nil }

    /// Opens the connection.
    open func connect() { manager.openConnection() }

    /// Reports `reason` to the client, then closes.
    open func didError(reason: String) {
        client?.engineDidError(reason: reason)
        disconnect(reason: reason)
    }

    /// Closes the connection.
    open func disconnect(reason: String) { manager.disconnect() }

    /// No effect (upgrades are SocketIOEngine's).
    open func doFastUpgrade() {}

    /// No effect (SocketIOEngine's transport flushes itself).
    open func flushWaitingForPostToWebSocket() {}

    /// Hands binary data to the client.
    open func parseEngineData(_ data: Data) { client?.parseEngineBinaryData(data) }

    /// Hands a Socket.IO message (an Engine.IO message packet's text without its type digit
    /// `4`) to the client.
    open func parseEngineMessage(_ message: String) {
        guard message.first == "4" else { return }
        client?.parseEngineMessage(String(message.dropFirst()))
    }

    /// Applies `config` (to the next connection).
    open func setConfigs(_ config: SocketIOClientConfiguration) { lock.withLock { settings.apply(config) } }

    /// No effect: the transport is SocketIOEngine's; `completion` runs at once.
    open func write(_ msg: String, withType type: SocketEnginePacketType, withData data: [Data], completion: (() -> ())? = nil) {
        completion?()
    }

    /// Starscream's delegate method.
    @available(*, unavailable, message: "there is no Starscream WebSocket; the transport is internal")
    public func didReceive(event: WebSocketEvent, client: WebSocket) {}

    /// The URLSession delegate method.
    @available(*, unavailable, message: "there is no URLSession; the transport is internal")
    public func URLSession(session: URLSession, didBecomeInvalidWithError error: NSError?) {}

    /// The polling URLSession.
    @available(*, unavailable, message: "there is no URLSession; the transport is internal")
    public var session: URLSession? { nil }
}

extension SocketEnginePollable {
    /// No effect here (SocketIOEngine's transport polls by itself).
    public func doPoll() {}

    /// No effect here; `completion` runs at once.
    public func sendPollMessage(_ message: String, withType type: SocketEnginePacketType, withData datas: [Data], completion: (() -> ())? = nil) {
        completion?()
    }

    /// No effect here.
    public func stopPolling() {}
}

extension SocketEngineWebsocket {
    /// No effect here; `completion` runs at once.
    public func sendWebSocketMessage(_ str: String, withType type: SocketEnginePacketType, withData data: [Data], completion: (() -> ())?) {
        completion?()
    }
}

extension SocketEngineSpec {
    /// Starscream's WebSocket.
    @available(*, unavailable, message: "there is no Starscream WebSocket; the transport is internal")
    public var ws: WebSocket? { nil }
}

extension SocketEnginePollable {
    /// The polling URLSession.
    @available(*, unavailable, message: "there is no URLSession; the transport is internal")
    public var session: URLSession? { nil }
}

/// Starscream's WebSocket.
@available(*, unavailable, message: "there is no Starscream WebSocket; the transport is internal")
public final class WebSocket {}

/// Starscream's WebSocket event.
@available(*, unavailable, message: "there is no Starscream WebSocket; the transport is internal")
public enum WebSocketEvent {}
