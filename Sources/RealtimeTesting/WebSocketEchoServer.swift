import Hummingbird
import HummingbirdCore
import HTTPTypes
import HummingbirdTLS
import HummingbirdWebSocket
import HummingbirdWSCompression
import NIOCore
public import NIOSSL
import NIOWebSocket
import RealtimeCore

/// A WebSocket server on loopback that echoes every message back, for transport tests and the demo.
///
/// Text messages starting with `!` are commands, so a test can make the server misbehave on purpose:
/// - `!close <code> <reason>`: close the connection with that code.
/// - `!send <n>`: send a text message of `n` bytes.
/// - `!header <name>`: answer with the value of that upgrade request header (or `<none>`).
/// - `!protocol`: answer with the subprotocol the server selected (or `<none>`).
/// - `!sink <n>`: take the next `n` messages without answering, then send `sunk <n>` (for one-way
///   throughput: the client's burst is over when that arrives).
/// The server selects the first subprotocol the client offers.
public enum WebSocketEchoServer {
    /// Starts the server on 127.0.0.1 with an ephemeral port.
    /// - Parameters:
    ///   - tls: serve `wss://` with this configuration.
    ///   - compression: offer permessage-deflate.
    ///   - maxMessageSize: the largest message accepted, in bytes.
    public static func start(
        tls: TLSConfiguration? = nil,
        compression: Bool = false,
        maxMessageSize: Int = 16 << 20
    ) async throws -> LoopbackServer {
        let configuration = WebSocketServerConfiguration(
            maxFrameSize: maxMessageSize,
            extensions: compression ? [.perMessageDeflate(maxDecompressedFrameSize: maxMessageSize)] : [],
            autoPing: .disabled
        )
        let base = HTTPServerBuilder.http1WebSocketUpgrade(configuration: .init(ws: configuration)) { request, channel, _ in
            var responseHeaders = HTTPFields()
            var selectedProtocol: String?
            if let offered = request.headerFields[.secWebSocketProtocol] {
                selectedProtocol = offered.split(separator: ",").first.map { String($0.trimmingCharacters(in: " ")) }
                if let selectedProtocol { responseHeaders[.secWebSocketProtocol] = selectedProtocol }
            }
            let requestHeaders = request.headerFields
            let chosenProtocol = selectedProtocol
            return .upgrade(responseHeaders) { inbound, outbound, _ in
                // Echo from the connection's event loop, as a NIO server would (no thread hop per message).
                try await withEventLoopPreference(channel.eventLoop) {
                    var sink = (remaining: 0, total: 0)
                    for try await message in inbound.messages(maxSize: maxMessageSize) {
                        if sink.remaining > 0 {
                            sink.remaining -= 1
                            if sink.remaining == 0 { try await outbound.write(.text("sunk \(sink.total)")) }
                            continue
                        }
                        switch message {
                        case .binary(let buffer):
                            try await outbound.write(.binary(buffer))
                        case .text(let text) where text.hasPrefix("!"):
                            let parts = text.dropFirst().split(separator: " ", maxSplits: 2).map(String.init)
                            switch parts.first {
                            case "close":
                                let code = parts.count > 1 ? Int(parts[1]) ?? 1000 : 1000
                                try await outbound.close(WebSocketErrorCode(codeNumber: code), reason: parts.count > 2 ? parts[2] : nil)
                                return
                            case "send":
                                let count = parts.count > 1 ? Int(parts[1]) ?? 0 : 0
                                try await outbound.write(.text(String(repeating: "x", count: count)))
                            case "header":
                                let name = parts.count > 1 ? HTTPField.Name(parts[1]) : nil
                                try await outbound.write(.text(name.flatMap { requestHeaders[$0] } ?? "<none>"))
                            case "protocol":
                                try await outbound.write(.text(chosenProtocol ?? "<none>"))
                            case "sink":
                                let count = parts.count > 1 ? Int(parts[1]) ?? 0 : 0
                                sink = (count, count)
                                if count == 0 { try await outbound.write(.text("sunk 0")) }
                            default:
                                try await outbound.write(.text(text))
                            }
                        case .text(let text):
                            try await outbound.write(.text(text))
                        }
                    }
                }
            }
        }
        let router = Router()
        router.get("/") { _, _ in "WebSocket echo server" }
        return try await LoopbackServer.start(
            responder: router,
            server: try tls.map { try HTTPServerBuilder.tls(base, tlsConfiguration: $0) } ?? base,
            secure: tls != nil)
    }
}

extension String {
    func trimmingCharacters(in set: Character) -> Substring {
        var slice = Substring(self)
        while slice.first == set { slice.removeFirst() }
        while slice.last == set { slice.removeLast() }
        return slice
    }
}

extension Substring {
    func trimmingCharacters(in set: Character) -> Substring {
        String(self).trimmingCharacters(in: set)
    }
}
