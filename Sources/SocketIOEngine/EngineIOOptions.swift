import Foundation
public import NIOHTTP1
public import RealtimeCore

/// How an Engine.IO v4 connection is made.
public struct EngineIOOptions: Sendable {
    /// An Engine.IO transport.
    public enum Transport: String, Sendable, CaseIterable {
        /// HTTP long polling.
        case polling
        /// WebSocket.
        case websocket
    }

    /// The server path; Socket.IO's default is `/socket.io/`.
    public var path: String = "/socket.io/"
    /// Extra query parameters for every request (after `EIO`, `transport` and `sid`).
    public var query: [String: String] = [:]
    /// Extra headers for every HTTP request and the WebSocket upgrade.
    public var headers: HTTPHeaders = [:]
    /// Headers made anew for every connection attempt (a bearer token that rotates), set over
    /// ``headers`` (a name it returns replaces the static value) for every request and the upgrade
    /// of that attempt's session. A provider that throws fails the attempt with
    /// `authenticationFailed`, and the reconnect rules apply. Nil (the default): none.
    public var headersProvider: (@Sendable () async throws -> HTTPHeaders)? = nil
    /// The transports to try, in order: the first one opens the session. With `upgrade`, a polling
    /// session moves to WebSocket when the server offers it and `.websocket` is in this list.
    public var transports: [Transport] = [.polling, .websocket]
    /// Whether to upgrade from polling to WebSocket.
    public var upgrade: Bool = true
    /// The limit for opening the session (HTTP or WebSocket handshake plus the Engine.IO open packet).
    public var connectTimeout: Duration = .seconds(20)
    /// TLS settings for https/wss servers.
    public var tls: TLSOptions = .default
    /// permessage-deflate on the WebSocket transport.
    public var compression: Bool = false
    /// The largest message accepted from the server (a WebSocket message, or a whole polling response).
    public var maxMessageSize: Int = 16 << 20

    /// The cookie store for the polling requests and the WebSocket upgrades (load balancers with
    /// sticky sessions route the upgrade by a cookie set on the handshake). Nil (the default): each
    /// `SocketManager` keeps a store of its own for its whole life. Pass a store to share cookies
    /// with other clients or to read them.
    public var cookies: CookieStore?
    /// Frames written over a WebSocket are kept, up to this window, until the server shows it
    /// received them (an ack for that emit or a later one); after a drop the kept ones are sent
    /// again on the next connection, so a cut loses none of them (the server may see some twice).
    /// Emits that leave a full window unconfirmed can no longer be sent again: after a drop they are
    /// counted in ``SocketIOClient/deliveryCounts`` (`leftResendWindow`) and reported by an `error`
    /// event, as possibly delivered.
    public var resendWindow: ResendWindow = .standard
    /// The most packets one polling POST carries. python-engineio answers a POST of more than 16
    /// packets with `ok` and drops all of it (`Payload.max_decode_packets`), so 16 is the default;
    /// engine.io (Node) has no such limit. Batches also stay within the server's `maxPayload`.
    public var maxPacketsPerPoll: Int = 16
    /// The most bytes of emits and acks waiting in a connected session for the transport to write
    /// them (their polling size). `emit` never waits: past this, emits go to the namespace's
    /// offline queue (bounded by `offlineQueueCapacity`, overflow reported), and move on to the
    /// session in order as it drains. Default 8 MiB.
    public var sendQueueLimit: Int = 8 << 20
    /// The largest payload assumed for a server whose open packet does not say (Engine.IO 3
    /// servers never do): 1 MB by default, engine.io's `maxHttpBufferSize` since 3.6 (socket.io
    /// 2.4 and later). Emits larger than this fail with `messageTooLarge` before anything is sent,
    /// and polling batches stay below it; raise it for a server configured to accept more.
    public var assumedMaxPayload: Int = 1_000_000
    /// The Engine.IO protocol revision spoken (3 for socket.io 2.x servers, else 4); set by the
    /// manager from ``SocketIOConfiguration/version``.
    var revision = 4
    /// Makes a value with every default.
    public init() {}

    /// WebSocket from the start, no polling.
    public static var websocketOnly: EngineIOOptions {
        var options = EngineIOOptions()
        options.transports = [.websocket]
        return options
    }

    /// Long polling only, no upgrade.
    public static var pollingOnly: EngineIOOptions {
        var options = EngineIOOptions()
        options.transports = [.polling]
        options.upgrade = false
        return options
    }
}

/// What the server said in its open packet.
public struct EngineIOHandshake: Sendable, Equatable {
    /// The session ID.
    public var sid: String
    /// The transports the server allows an upgrade to.
    public var upgrades: [String]
    /// How often the server pings.
    public var pingInterval: Duration
    /// How long after a ping's due time the server may still be heard from.
    public var pingTimeout: Duration
    /// The largest payload the server accepts, in bytes. Engine.IO 3 servers do not say: the
    /// smaller of their defaults is assumed, engine.io's 1 MB (`maxHttpBufferSize` since 3.6;
    /// python-engineio 3 accepts 100 MB), or ``EngineIOOptions/assumedMaxPayload``.
    public var maxPayload: Int

    init(json: JSONValue, revision: Int = 4, assumedMaxPayload: Int = 1_000_000) throws(SocketIOParseError) {
        guard let sid = json["sid"]?.stringValue else { throw .engineIOParserError("the open packet has no sid") }
        self.sid = sid
        upgrades = json["upgrades"]?.arrayValue?.compactMap(\.stringValue) ?? []
        // Some servers send fractional milliseconds; use what is there.
        pingInterval = .milliseconds(json["pingInterval"]?.doubleValue ?? 25_000)
        pingTimeout = .milliseconds(json["pingTimeout"]?.doubleValue ?? 20_000)
        maxPayload = json["maxPayload"]?.intValue ?? assumedMaxPayload
    }
}

/// Builds the Engine.IO URLs for one server.
struct EngineIOURLs: Sendable {
    let secure: Bool
    let authority: String
    let path: String
    let baseQuery: String
    /// `EIO=4`, or `EIO=3`; polling in revision 3 also asks for text payloads (`b64=1`), which every
    /// Engine.IO 3 server sends (binary as `b4` + base64) instead of its XHR2 binary framing.
    let pollingPrefix: String
    let websocketPrefix: String

    init(url: String, options: EngineIOOptions) throws {
        guard let components = URLComponents(string: url), let scheme = components.scheme?.lowercased(),
            ["http", "https", "ws", "wss"].contains(scheme), let host = components.host, !host.isEmpty
        else {
            throw RealtimeError.invalidURL(url)
        }
        secure = scheme == "https" || scheme == "wss"
        let hostPart = host.contains(":") ? "[\(host)]" : host
        authority = components.port.map { "\(hostPart):\($0)" } ?? hostPart
        var path = options.path.isEmpty ? "/socket.io/" : options.path
        if !path.hasPrefix("/") { path = "/" + path }
        if !path.hasSuffix("/") { path += "/" }
        self.path = path
        pollingPrefix = options.revision == 3 ? "EIO=3&transport=polling&b64=1" : "EIO=4&transport=polling"
        websocketPrefix = "EIO=\(options.revision)&transport=websocket"
        var items = components.queryItems ?? []
        for key in options.query.keys.sorted() { items.append(URLQueryItem(name: key, value: options.query[key])) }
        var encoder = URLComponents()
        encoder.queryItems = items
        baseQuery = items.isEmpty ? "" : "&" + (encoder.percentEncodedQuery ?? "")
    }

    func polling(sid: String?) -> String {
        "\(secure ? "https" : "http")://\(authority)\(path)?\(pollingPrefix)\(sid.map { "&sid=\(Self.escape($0))" } ?? "")\(baseQuery)"
    }

    func websocket(sid: String?) -> String {
        "\(secure ? "wss" : "ws")://\(authority)\(path)?\(websocketPrefix)\(sid.map { "&sid=\(Self.escape($0))" } ?? "")\(baseQuery)"
    }

    static func escape(_ text: String) -> String {
        text.addingPercentEncoding(withAllowedCharacters: .urlQueryAllowed.subtracting(CharacterSet(charactersIn: "&=+"))) ?? text
    }
}
