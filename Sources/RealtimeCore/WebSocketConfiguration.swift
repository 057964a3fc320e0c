public import NIOHTTP1

/// Options for ``WebSocketTransport``. Add options as fields here, never as initialiser overloads.
public struct WebSocketConfiguration: Sendable {
    /// Extra headers sent with the upgrade request (authorisation, cookies, ...). Never logged.
    public var headers: HTTPHeaders
    /// The `Origin` header of the upgrade request. Nil (the default) sends none, as native clients
    /// do; servers that check origins (python-engineio, ASP.NET Core with CORS) accept that. Set it
    /// only when a server requires a particular origin.
    public var origin: String?
    /// A cookie store shared with the client's HTTP requests: the upgrade sends its matching
    /// cookies and stores the response's `Set-Cookie`. Nil (the default): no cookie handling.
    public var cookies: CookieStore?
    /// Subprotocols offered in `Sec-WebSocket-Protocol`, most preferred first.
    public var subprotocols: [String]
    /// Offer permessage-deflate (RFC 7692, zlib). The server decides whether it is used.
    public var compression: Bool
    /// The largest message accepted, after reassembly and decompression; also the largest single
    /// frame read off the wire. A larger one closes the connection with code 1009 and fails with
    /// ``RealtimeError/Code/messageTooLarge``. Default 1 MiB.
    public var maxMessageSize: Int
    /// The keep-alive interval: a ping goes out after this long without a frame from the peer, and
    /// the connection fails with ``RealtimeError/Code/timeout`` when the next interval passes
    /// without an answer, so a silent peer is found within three intervals. A consumer that stopped
    /// reading (its buffer full) is not taken for a silent peer. Runs on the runtime's clock; nil
    /// disables.
    public var autoPing: Duration?
    /// How long the TCP connect, TLS handshake and upgrade may take together (a refused upgrade's
    /// body excerpt is read within the same limit).
    public var connectTimeout: Duration
    /// How long to wait for the server's close frame after sending one.
    public var closeTimeout: Duration
    /// Reject text messages that are not valid UTF-8 (with code 1007) instead of repairing them.
    public var validateUTF8: Bool
    /// How TLS is checked for a `wss://` URL.
    public var tls: TLSOptions
    /// A protocol's keep-alive messages, handled on the event loop (SignalR, Engine.IO).
    package var protocolPing: WebSocketProtocolPing?
    /// The set-up slot for the server's host is held already, by the connect that opens this
    /// connection (a SignalR start holds it through negotiate and handshake): the connection does
    /// not wait for one again.
    package var setUpSlotHeld = false

    /// Makes a configuration; every parameter is the property of the same name.
    public init(
        headers: HTTPHeaders = [:],
        origin: String? = nil,
        cookies: CookieStore? = nil,
        subprotocols: [String] = [],
        compression: Bool = false,
        maxMessageSize: Int = 1 << 20,
        autoPing: Duration? = .seconds(30),
        connectTimeout: Duration = .seconds(10),
        closeTimeout: Duration = .seconds(5),
        validateUTF8: Bool = true,
        tls: TLSOptions = .default
    ) {
        self.headers = headers
        self.origin = origin
        self.cookies = cookies
        self.subprotocols = subprotocols
        self.compression = compression
        self.maxMessageSize = maxMessageSize
        self.autoPing = autoPing
        self.connectTimeout = connectTimeout
        self.closeTimeout = closeTimeout
        self.validateUTF8 = validateUTF8
        self.tls = tls
    }
}

/// How a WebSocket connection was closed by the server.
public struct WebSocketCloseInfo: Sendable, Equatable {
    /// The close code (1000 normal, 1001 going away, 1009 too big, 4000-4999 application codes...).
    public let code: UInt16
    /// The close reason, if the server sent one.
    public let reason: String?
}

/// The server's answer to the upgrade request, readable on the open connection.
public struct WebSocketUpgradeResponse: Sendable {
    /// `101 Switching Protocols` on an open connection.
    public let status: HTTPResponseStatus
    /// Every header of the response (`Set-Cookie`, server-specific headers...).
    public let headers: HTTPHeaders

    /// The subprotocol the server chose from those offered, if any.
    public var subprotocol: String? {
        headers.first(name: "sec-websocket-protocol")?.trimmingSpacesString()
    }

    /// The names of the extensions the server accepted (`permessage-deflate`).
    public var extensions: [String] {
        headers[canonicalForm: "sec-websocket-extensions"].compactMap { value in
            value.split(separator: ";", maxSplits: 1).first.map { String($0.trimmingSpaces()) }
        }
    }
}

extension String {
    func trimmingSpacesString() -> String { String(Substring(self).trimmingSpaces()) }
}
