import ArgumentParser
import Foundation
import NIOCore
import NIOHTTP1
import RealtimeCore

struct WebSocketCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "ws", abstract: "Connect to a WebSocket, send messages, print what arrives.")

    @Argument(help: "ws:// or wss:// URL") var url: String
    @OptionGroup var connection: ConnectionOptions
    @Option(name: .long, help: "A text message to send after connecting (repeatable).") var send: [String] = []
    @Option(name: .long, help: "Offer this subprotocol (repeatable).") var subprotocol: [String] = []
    @Flag(name: .long, help: "Offer permessage-deflate.") var compress = false
    @Option(name: .long, help: "Stop after this many received messages.") var count: Int?

    func run() async throws {
        let configuration = WebSocketConfiguration(
            headers: try self.connection.headers, subprotocols: subprotocol, compression: compress,
            connectTimeout: self.connection.connectTimeout, tls: self.connection.tls)
        let (messages, limit, json, url, runtime) = (send, count, self.connection.json, url, self.connection.runtime)
        do {
            try await Interruption.run {
                let close = try await WebSocketTransport.connect(to: url, configuration: configuration, runtime: runtime) { connection in
                    for message in messages { try await connection.send(text: message) }
                    var received = 0
                    for try await message in connection.inbound {
                        switch (message, json) {
                        case (.text(let text), false): say(text)
                        case (.binary(let buffer), false): say("<binary \(buffer.readableBytes) bytes>")
                        case (.text(let text), true): say("{\"text\":\(JSONText.quote(text))}")
                        case (.binary(let buffer), true): say("{\"binary\":\(JSONText.quote(Data(buffer.readableBytesView).base64EncodedString()))}")
                        }
                        received += 1
                        if let limit, received >= limit { break }
                    }
                    try await connection.close()
                }
                if let close { printError("realtime ws: closed: \(close.code) \(close.reason ?? "")") }
            }
        } catch let error as RealtimeError {
            printError("realtime ws: \(error)")
            throw ExitCode.failure
        }
    }
}
