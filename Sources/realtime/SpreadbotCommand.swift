import ArgumentParser
import Foundation
import NIOHTTP1
import RealtimeCore
import SpreadbotClient

struct SpreadbotCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "spreadbot",
        abstract: "Talk to a Spreadbot server: subscribe to a path's stream, send to it, GET a REST path.",
        discussion: """
            Examples:
              realtime spreadbot https://bot.example.com --path prices --count 10
              realtime spreadbot https://bot.example.com --path chat --send hello --json
              realtime spreadbot https://bot.example.com --get profile --access-token T

            With --path it prints the stream's messages until --count arrived (or forever), after \
            sending --send. Each --send waits until it went out: written to the WebSocket (a cut right \
            after may lose it; the command cannot know), or, with --acknowledged, answered 2xx by the \
            server's POST (the server has it; a cut re-sends it without a duplicate). --get prints the \
            REST reply's body. The transport in use and every error go to standard error.
            """)

    @Argument(help: "The server's http:// or https:// base URL") var baseURL: String
    @OptionGroup var connection: ConnectionOptions
    @Option(name: .long, help: "Subscribe to this path's stream.") var path: String?
    @Option(name: .long, help: "Send this text on the stream (needs --path; repeatable, sent in order).") var send: [String] = []
    @Flag(name: .long, help: "Send with POST even over a WebSocket: --send returns once the server answered 2xx.")
    var acknowledged = false
    @Option(name: .long, help: "GET this REST path and print the body.") var get: String?
    @Option(name: .long, help: "With --path: stop after this many messages.") var count: Int?
    @Option(name: .long, help: "websocket, sse or polling: use only this transport.") var transport: String?
    @Option(name: .long, help: "The bearer token.") var accessToken: String?
    @Option(name: .long, help: "A refresh token, used at --auth-url on a 401.") var refreshToken: String?
    @Option(name: .long, help: "The OAuth token endpoint.") var authURL: String?
    @Option(name: .long, help: "base64(client_id:client_secret) for the token endpoint.") var credentials: String?
    @Option(name: .long, help: "Once connected, give up after this many consecutive failed reconnects (default 3).")
    var reconnectAttempts: Int?
    @Option(name: .long, help: "Try a first connection that fails this many more times, as curl's --retry (default: exit at once, unless --reconnect-attempts is given).")
    var retry: Int?

    var json: Bool { connection.json }

    static let transports: [String: SpreadbotTransport] = ["websocket": .webSocket, "sse": .serverSentEvents, "polling": .polling]

    func validate() throws {
        if path == nil && get == nil { throw ValidationError("give --path (stream) or --get (REST), or both") }
        if !send.isEmpty && path == nil { throw ValidationError("--send needs --path") }
        if let transport, Self.transports[transport] == nil { throw ValidationError("--transport is websocket, sse or polling") }
    }

    func line(_ message: SpreadbotMessage) -> String {
        let data: String
        switch message.data {
        case .text(let text): data = json ? JSONText.quote(text) : text
        case .binary(let bytes): data = json ? JSONText.quote(bytes.base64EncodedString()) : "<\(bytes.count) bytes, base64 \(bytes.base64EncodedString())>"
        }
        guard json else { return "\(message.id) \(message.event) \(data)" }
        let kind = if case .binary = message.data { "binary" } else { "text" }
        return "{\"id\":\(JSONText.quote(message.id)),\"event\":\(JSONText.quote(message.event)),\"\(kind)\":\(data),\"transport\":\"\(message.transport)\"}"
    }

    func run() async throws {
        var configuration = SpreadbotConfiguration(
            baseURL: baseURL, authURL: authURL, accessToken: accessToken, refreshToken: refreshToken, base64Credentials: credentials)
        if let transport { configuration.transports = [Self.transports[transport]!] }
        configuration.tls = connection.tls
        configuration.requestTimeout = connection.connectTimeout
        configuration.acknowledgedSends = acknowledged
        configuration.headers = try connection.headers
        configuration.runtime = connection.runtime
        configuration.maxReconnectAttempts = max(reconnectAttempts ?? 3, retry ?? 0)
        let client = Spreadbot(configuration: configuration)
        let firstConnection = FirstConnectionWatch()
        client.onError { error in
            firstConnection.record("\(error)")
            printError("realtime spreadbot: \(error)")
        }
        client.onTokensRefreshed { _ in printError("realtime spreadbot: the access token was refreshed") }
        if let get {
            do {
                let response = try await client.rest.getData(path: get)
                let body = response.text ?? response.body.base64EncodedString()
                say(json ? "{\"status\":\(response.status.code),\"body\":\(JSONText.quote(body))}" : body)
            } catch {
                printError("realtime spreadbot: GET \(get) failed: \(error)")
                throw ExitCode.failure
            }
        }
        guard let path else { return }
        let messages = client.messages().makeAsyncIterator()
        // A first connection that fails ends the command, as curl does, unless retries were asked
        // for: the client's reconnects before the first connection are cut short.
        let firstRetries = retry ?? reconnectAttempts ?? 0
        let states = client.connectionState.updates()
        client.establishConnection(path: path)
        let opened = await firstConnection.watch(states, retries: firstRetries) == .connected
        guard opened else {
            let cause = client.lastError.map { "\($0)" } ?? firstConnection.lastError ?? "closed"
            client.closeConnection()
            printError("realtime spreadbot: could not connect (\(FirstConnectionWatch.retries(firstRetries))): \(cause)")
            throw ExitCode.failure
        }
        // The reconnect loop says connected as the transport opens; the client names it just after.
        var transport: SpreadbotTransport?
        for await current in client.transportUpdates() where current != nil {
            transport = current
            break
        }
        printError("realtime spreadbot: connected over \(transport.map { "\($0)" } ?? "?")")
        let messageIterator = MessageIteratorBox(messages)
        let (texts, limit, command) = (send, count, self)
        do {
            try await Interruption.run {
                for text in texts { try await client.send(text) }
                var seen = 0
                while limit.map({ seen < $0 }) ?? true, let message = try await messageIterator.next() {
                    say(command.line(message))
                    seen += 1
                }
            }
        } catch let interrupted as ExitCode {
            client.closeConnection()
            throw interrupted
        } catch {
            printError("realtime spreadbot: \(error)")
            client.closeConnection()
            throw ExitCode.failure
        }
        client.closeConnection()
        if let error = client.lastError {
            printError("realtime spreadbot: the connection ended: \(error)")
            throw ExitCode.failure
        }
    }
}

/// The iterator the interruptible work reads (it is used by that one task only).
final class MessageIteratorBox: @unchecked Sendable {
    // @unchecked Sendable: handed to the one task that iterates; nothing else touches it.
    private var iterator: SpreadbotMessages.AsyncIterator
    init(_ iterator: SpreadbotMessages.AsyncIterator) { self.iterator = iterator }
    func next() async throws -> SpreadbotMessage? { try await iterator.next() }
}
