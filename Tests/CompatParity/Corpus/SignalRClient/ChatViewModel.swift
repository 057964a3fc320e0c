// A main-actor view model in the official client's (dotnet/signalr-client-swift) README style:
// HubConnectionBuilder().withUrl(url:), try await start(), await on(...) with typed handlers,
// automatic reconnect with callbacks, invoke/send/stream with async/await, a client result.
import Foundation
import SignalRClient

@MainActor
final class ChatViewModel {
    private(set) var messages: [String] = []
    private(set) var status = "disconnected"
    private var connection: HubConnection?

    func connect() async {
        var options = HttpConnectionOptions()
        options.accessTokenFactory = { "token" }
        options.transport = [.webSockets, .serverSentEvents]
        let connection = HubConnectionBuilder()
            .withUrl(url: "https://example.com/chathub", options: options)
            .withAutomaticReconnect([0, 2, 10])
            .withLogLevel(logLevel: .information)
            .withKeepAliveInterval(keepAliveInterval: 15)
            .withServerTimeout(serverTimeout: 30)
            .build()
        self.connection = connection

        await connection.on("ReceiveMessage") { (user: String, message: String) in
            await MainActor.run { self.messages.append("\(user): \(message)") }
        }
        await connection.on("GetClientName") { (prefix: String) in
            return "\(prefix)-ios"
        }
        await connection.onReconnecting { [weak self] error in
            await self?.setStatus("reconnecting: \(error?.localizedDescription ?? "")")
        }
        await connection.onReconnected { [weak self] in
            await self?.setStatus("connected")
        }
        await connection.onClosed { [weak self] error in
            await self?.setStatus(error == nil ? "disconnected" : "closed: \(error!)")
        }

        do {
            try await connection.start()
            status = "connected"
        } catch {
            status = "failed: \(error)"
        }
    }

    func send(_ text: String) async {
        do {
            try await connection?.invoke(method: "SendMessage", arguments: "me", text)
        } catch let error as SignalRError {
            status = error.description
        } catch {
            status = "\(error)"
        }
    }

    func count(to n: Int) async throws -> [Int] {
        guard let connection else { return [] }
        let result: any StreamResult<Int> = try await connection.stream(method: "Counter", arguments: n, 100)
        var numbers: [Int] = []
        for try await number in result.stream {
            numbers.append(number)
            if numbers.count == 5 { await result.cancel() }
        }
        return numbers
    }

    func upload(_ values: [Int]) async throws {
        let (stream, continuation) = AsyncStream.makeStream(of: Int.self)
        try await connection?.send(method: "UploadStream", arguments: stream)
        for value in values { continuation.yield(value) }
        continuation.finish()
    }

    func total() async throws -> Int {
        guard let connection else { return 0 }
        return try await connection.invoke(method: "Add", arguments: 1, 2)
    }

    func disconnect() async {
        await connection?.stop()
        if let connection, await connection.state() == .Stopped {
            status = "disconnected"
        }
    }

    private func setStatus(_ text: String) {
        status = text
    }
}
