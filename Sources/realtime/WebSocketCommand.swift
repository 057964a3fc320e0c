import ArgumentParser
import NIOCore
import NIOHTTP1
import RealtimeCore

struct WebSocketCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "ws", abstract: "Connect to a WebSocket, send messages, print what arrives.")

    @Argument(help: "ws:// or wss:// URL") var url: String
    @Option(name: .long, help: "A text message to send after connecting (repeatable).") var send: [String] = []
    @Option(name: .shortAndLong, help: "A header 'Name: value' for the upgrade request (repeatable).") var header: [String] = []
    @Option(name: .long, help: "Offer this subprotocol (repeatable).") var subprotocol: [String] = []
    @Flag(name: .long, help: "Offer permessage-deflate.") var compress = false
    @Option(name: .long, help: "Stop after this many received messages.") var count: Int?
    @Flag(name: .long, help: "Skip certificate verification (dangerous).") var insecure = false

    func run() async throws {
        var configuration = WebSocketConfiguration(subprotocols: subprotocol, compression: compress)
        for line in header {
            let parts = line.split(separator: ":", maxSplits: 1)
            guard parts.count == 2 else { throw ValidationError("headers look like 'Name: value'") }
            configuration.headers.add(name: String(parts[0]), value: String(parts[1].drop(while: { $0 == " " })))
        }
        if insecure { configuration.tls = .dangerouslyDisableCertificateVerification() }
        let messages = send
        let limit = count
        let close = try await WebSocketTransport.connect(to: url, configuration: configuration) { connection in
            for message in messages { try await connection.send(text: message) }
            var received = 0
            for try await message in connection.inbound {
                switch message {
                case .text(let text): print(text)
                case .binary(let buffer): print("<binary \(buffer.readableBytes) bytes>")
                }
                received += 1
                if let limit, received >= limit { break }
            }
            try await connection.close()
        }
        if let close { print("closed: \(close.code) \(close.reason ?? "")") }
    }
}
